defmodule Mix.Tasks.Compile.OverworldNative do
  @shortdoc "Builds the shared-segment NIF (priv/native/overworld_shm.so)"
  @moduledoc """
  A Mix compiler (mix.exs: `compilers: Mix.compilers() ++ [:overworld_native]`) that builds
  the NIF of `Overworld.Sidecar.Shm`, `priv/native/overworld_shm.so`, from
  `c_src/overworld_shm.c`:

      cc -O2 -fPIC -shared -Wall -Wextra -Werror -I<erts include> -o priv/native/overworld_shm.so c_src/overworld_shm.c

  It compiles only when the library is missing or older than its source (silent otherwise),
  into a temporary file renamed over the library (a node that has the old one loaded keeps a
  valid mapping). The include directory is the running runtime's (`erts-VSN/include` under
  `:code.root_dir/0`), else `/usr/lib/erlang/usr/include`. Without a `cc` on the `PATH` it
  prints one warning and succeeds: the shared-memory transport then reports the library
  missing when a zone starts (`Overworld.Sidecar.Shm.load/0`).

  Paths are relative to the project's directory, the current directory when Mix compiles a
  project, also when it compiles this one as another project's dependency. `priv/` reaches the
  build through the link (or copy) Mix makes of it (`_build/ENV/lib/overworld/priv`); a copy
  made before this compiler ran is refreshed.
  """
  use Mix.Task.Compiler

  @source "c_src/overworld_shm.c"
  @target "priv/native/overworld_shm.so"
  @recursive true

  @impl true
  def run(_args) do
    cond do
      not File.exists?(@source) ->
        {:noop, []}

      up_to_date?() ->
        sync_build_priv()
        {:noop, []}

      cc = System.find_executable("cc") ->
        build(cc)

      true ->
        Mix.shell().error(
          "warning: no C compiler (cc): #{@target} not built, the shared-memory sidecar " <>
            "transport is unavailable"
        )

        {:ok, []}
    end
  end

  @impl true
  def clean do
    File.rm(@target)
    :ok
  end

  defp up_to_date?, do: up_to_date?(@target, [@source])

  @doc false
  # Whether `target` exists and is at least as new as every file of `sources` (a missing
  # source counts as older).
  @spec up_to_date?(Path.t(), [Path.t()]) :: boolean
  def up_to_date?(target, sources) do
    case File.stat(target, time: :posix) do
      {:ok, t} ->
        Enum.all?(sources, fn source ->
          case File.stat(source, time: :posix) do
            {:ok, s} -> s.mtime <= t.mtime
            {:error, _} -> true
          end
        end)

      {:error, _} ->
        false
    end
  end

  defp build(cc) do
    File.mkdir_p!(Path.dirname(@target))
    tmp = "#{@target}.#{System.os_time()}.tmp"

    args =
      ["-O2", "-fPIC", "-shared", "-Wall", "-Wextra", "-Werror"] ++
        ["-I#{include_dir()}", "-o", tmp, @source]

    Mix.shell().info("Compiling #{@source} (cc)")

    case System.cmd(cc, args, stderr_to_stdout: true) do
      {output, 0} ->
        if output != "", do: Mix.shell().info(output)
        File.rename!(tmp, @target)
        sync_build_priv()
        {:ok, []}

      {output, status} ->
        File.rm(tmp)
        failure("overworld_native", @source, "cc exited with status #{status}:\n" <> output)
    end
  end

  @doc false
  # A compiler's failure: the message printed, and its diagnostic on `file`.
  @spec failure(String.t(), Path.t(), String.t()) :: {:error, [Mix.Task.Compiler.Diagnostic.t()]}
  def failure(compiler, file, message) do
    Mix.shell().error(message)

    {:error,
     [
       %Mix.Task.Compiler.Diagnostic{
         compiler_name: compiler,
         file: Path.expand(file),
         message: message,
         position: nil,
         severity: :error
       }
     ]}
  end

  # The runtime's own headers (erl_nif.h), else Debian's erlang-dev location.
  defp include_dir do
    erts = Path.join([:code.root_dir(), "erts-#{:erlang.system_info(:version)}", "include"])

    if File.exists?(Path.join(erts, "erl_nif.h")),
      do: erts,
      else: "/usr/lib/erlang/usr/include"
  end

  # Mix links the project's priv/ into the build (nothing to do), or copies it (build_embedded):
  # then the copy gets the library too.
  defp sync_build_priv, do: sync_build_priv(@target)

  @doc false
  # `target` (a file of priv/) into the build's copy of priv/, if it is a copy and the file
  # there is not the same (through a temporary file renamed over the old one).
  @spec sync_build_priv(Path.t()) :: :ok
  def sync_build_priv(target) do
    build_priv = Path.join(Mix.Project.app_path(), "priv")

    case File.lstat(build_priv) do
      {:ok, %File.Stat{type: :directory}} ->
        copy = Path.join(build_priv, Path.relative_to(target, "priv"))

        unless same_file?(copy, target), do: install!(target, copy, File.stat!(target).mode)
        :ok

      _ ->
        :ok
    end
  end

  @doc false
  # Copies `source` to `target` (mode `mode`) through a temporary file renamed over it, so a
  # process running or mapping the old file keeps it whole.
  @spec install!(Path.t(), Path.t(), non_neg_integer) :: :ok
  def install!(source, target, mode) do
    File.mkdir_p!(Path.dirname(target))
    tmp = "#{target}.#{System.os_time()}.tmp"
    File.cp!(source, tmp)
    File.chmod!(tmp, mode)
    File.rename!(tmp, target)
  end

  defp same_file?(a, b) do
    case {File.stat(a, time: :posix), File.stat(b, time: :posix)} do
      {{:ok, sa}, {:ok, sb}} -> sa.size == sb.size and sa.mtime >= sb.mtime
      _ -> false
    end
  end
end
