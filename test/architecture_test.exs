defmodule Overworld.ArchitectureTest do
  # The architecture's rules (docs/architecture.md, "Rules the code keeps"), checked on the
  # compiled code: for every module of the app, the modules it references are read from its
  # BEAM file (`:beam_lib`): the imports table (every remote call, into Elixir, OTP or our own
  # modules) and the atom table (every module named in the code, also as a struct or in an
  # `apply`, where it is an Elixir module). A rule that breaks fails with the module and what
  # it references.
  use ExUnit.Case, async: true

  @app :overworld
  # The applications the library may use (mix.exs and its Debian-packaged dependencies).
  @allowed_apps [
    :erts,
    :elixir,
    :logger,
    :mix,
    :eex,
    :kernel,
    :stdlib,
    :compiler,
    :crypto,
    :mnesia,
    :runtime_tools,
    :tools,
    :jiffy,
    :cowlib,
    # Debian's erlang-p1-pgsql (Overworld.Postgres) and the stringprep its SCRAM login needs.
    :p1_pgsql,
    :stringprep,
    # Debian's erlang-luerl (Overworld.Lua).
    :luerl
  ]

  setup_all do
    root = File.cwd!()

    modules =
      for module <- Application.spec(@app, :modules), into: %{} do
        path = :code.which(module)
        {:ok, {^module, chunks}} = :beam_lib.chunks(path, [:imports, :atoms, :compile_info])
        source = chunks[:compile_info][:source] |> to_string() |> Path.relative_to(root)

        calls = for {m, f, a} <- chunks[:imports], do: {m, f, a}

        named =
          for {_i, atom} <- chunks[:atoms],
              String.starts_with?(Atom.to_string(atom), "Elixir."),
              do: atom

        referenced = MapSet.new(Enum.map(calls, &elem(&1, 0)) ++ named) |> MapSet.delete(module)
        {module, %{source: source, calls: calls, referenced: referenced}}
      end

    lib = for {m, %{source: "lib/" <> _}} <- modules, do: m
    %{modules: modules, lib: MapSet.new(lib)}
  end

  defp under?(module, prefixes) do
    name = inspect(module)
    Enum.any?(prefixes, fn p -> name == p or String.starts_with?(name, p <> ".") end)
  end

  defp violations(ctx, from_prefixes, fun) do
    for m <- ctx.lib,
        under?(m, from_prefixes),
        bad = Enum.filter(ctx.modules[m].referenced, &fun.(m, &1)),
        bad != [],
        do: {m, Enum.sort(bad)}
  end

  defp app_of(module) do
    case :application.get_application(module) do
      {:ok, app} ->
        app

      :undefined ->
        # Not loaded yet: find it by its file.
        case :code.which(module) do
          :preloaded ->
            :erts

          path when is_list(path) ->
            Enum.find(@allowed_apps, fn app ->
              match?(dir when is_list(dir), :code.lib_dir(app)) and
                String.starts_with?(to_string(path), to_string(:code.lib_dir(app)))
            end)

          _ ->
            nil
        end
    end
  end

  test "the library (lib/) uses only itself, Elixir, OTP and its declared dependencies: no example, no dev/ or test code",
       ctx do
    outside =
      violations(ctx, ["Overworld", "Mix.Tasks.Overworld"], fn _m, ref ->
        cond do
          MapSet.member?(ctx.lib, ref) -> false
          Map.has_key?(ctx.modules, ref) -> true
          # Our own names that are no module (registered processes: Overworld.Registry).
          :code.which(ref) == :non_existing and under?(ref, ["Overworld"]) -> false
          true -> app_of(ref) not in @allowed_apps
        end
      end)

    # Atoms that merely look like module names in our own code (none expected) would show here.
    assert outside == [],
           "modules of lib/ reference code outside the library: #{inspect(outside, pretty: true)}"
  end

  test "the library compiles without dev/ and test/: on the production paths there is lib/ only" do
    assert "lib" in Mix.Project.config()[:elixirc_paths]
    assert production_paths() == ["lib"]
  end

  # mix.exs keeps elixirc_paths/1 private: the clause a production build (any env but dev
  # and test) takes, read from its source.
  defp production_paths do
    {:ok, ast} = "mix.exs" |> File.read!() |> Code.string_to_quoted()

    {_, found} =
      Macro.prewalk(ast, nil, fn
        {:defp, _, [{:elixirc_paths, _, [{:_, _, _}]}, [do: paths]]} = node, nil -> {node, paths}
        node, acc -> {node, acc}
      end)

    found
  end

  test "codecs know no processes: templates and the protocol send no message, touch no table, start nothing",
       ctx do
    forbidden_modules = [
      :ets,
      :gen_server,
      :gen_statem,
      :proc_lib,
      :persistent_term,
      :atomics,
      :counters,
      GenServer,
      Process,
      Registry,
      Task,
      Agent,
      Supervisor,
      DynamicSupervisor
    ]

    forbidden_bifs = [
      :send,
      :spawn,
      :spawn_link,
      :spawn_opt,
      :monitor,
      :link,
      :register,
      :whereis,
      :process_flag,
      :self,
      :put,
      :get
    ]

    bad =
      for m <- ctx.lib,
          under?(m, ["Overworld.Template", "Overworld.Protocol"]),
          call <- ctx.modules[m].calls,
          forbidden?(call, forbidden_modules, forbidden_bifs),
          do: {m, call}

    assert bad == [], "codecs with process calls: #{inspect(bad, pretty: true)}"
  end

  defp forbidden?({mod, fun, _arity}, modules, bifs),
    do: mod in modules or (mod == :erlang and fun in bifs)

  test "the grid knows no zones", ctx do
    bad =
      violations(ctx, ["Overworld.Spatial"], fn _m, ref ->
        under?(ref, [
          "Overworld.Zone",
          "Overworld.Interest",
          "Overworld.Session",
          "Overworld.Server"
        ])
      end)

    assert bad == [], "the spatial grid references zones: #{inspect(bad, pretty: true)}"
  end

  test "the simulation knows no sockets or HTTP", ctx do
    network = [:gen_tcp, :gen_udp, :inet, :socket, :ssl, :cow_ws, :cow_http, :cow_uri, :prim_inet]

    bad =
      violations(ctx, ["Overworld.Zone", "Overworld.Spatial", "Overworld.Entity"], fn _m, ref ->
        ref in network or
          under?(ref, [
            "Overworld.Transport",
            "Overworld.Session",
            "Overworld.Server",
            "Overworld.Web",
            "Overworld.Client",
            "Overworld.Bots"
          ])
      end)

    assert bad == [], "the simulation references the network: #{inspect(bad, pretty: true)}"
  end

  test "the rules are checked on real references (the checks are not empty)", ctx do
    # Without these the tests above would pass vacuously.
    assert MapSet.member?(ctx.modules[Overworld.Zone.Bucket].referenced, Overworld.Zone.Pass)
    assert {:ets, :insert, 2} in ctx.modules[Overworld.Zone.Wire].calls
    assert MapSet.member?(ctx.modules[Overworld.Session].referenced, Overworld.Interest)
    assert MapSet.size(ctx.lib) > 60
    # dev/ and test/support modules are compiled in this environment, but not from lib/.
    assert ctx.modules[Overworld.Protocol.Vectors].source =~ ~r{^dev/}
    refute MapSet.member?(ctx.lib, Overworld.Protocol.Vectors)
  end
end
