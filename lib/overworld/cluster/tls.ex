defmodule Overworld.Cluster.TLS do
  @moduledoc """
  TLS for the distribution between the nodes of a cluster (OTP's `inet_tls_dist`, see
  docs/cluster.md, "Security").

  Distributed Erlang gives a connected node full control of every other node. Over plain TCP
  the only secret is the cookie, sent nowhere but proved in a challenge, and everything after
  travels in the clear. With TLS each node presents a certificate and checks its peer's
  against the cluster's certificate authority: only nodes holding a certificate from that CA
  (and its key) connect, and the traffic is encrypted.

  TLS distribution is chosen when the VM starts, with two flags (`vm_args/1`):
  `-proto_dist inet_tls -ssl_dist_optfile PATH`, where the file (`optfile!/4`) names the
  node's certificate, its key and the CA, for both sides of a connection. The certificates
  come from the configuration (`from_env/1`: `OVERWORLD_TLS_CERT`, `OVERWORLD_TLS_KEY`,
  `OVERWORLD_TLS_CA`); `dev_certs!/1` makes a CA and a certificate for `127.0.0.1` with
  `openssl` for a cluster on one machine (`mix overworld.cluster --tls`). A certificate must
  name the host of the nodes that use it (subject alternative name, as a DNS name even for an
  address: the distribution checks the host part of the node name).
  """

  @typedoc "A node's certificate, its private key and the cluster's CA certificate (PEM files)."
  @type files :: %{cert: Path.t(), key: Path.t(), ca: Path.t()}

  @doc """
  The TLS files in `env` (default: the OS environment): `{:ok, nil}` when none is set,
  `{:ok, files}` when all three are, each an existing file; otherwise an error naming the
  variable.

      iex> Overworld.Cluster.TLS.from_env(%{})
      {:ok, nil}
      iex> Overworld.Cluster.TLS.from_env(%{"OVERWORLD_TLS_CERT" => "/nonexistent.pem"})
      {:error, "OVERWORLD_TLS_CERT, OVERWORLD_TLS_KEY and OVERWORLD_TLS_CA go together: OVERWORLD_TLS_KEY, OVERWORLD_TLS_CA missing"}
  """
  @spec from_env(%{optional(String.t()) => String.t()}) ::
          {:ok, files | nil} | {:error, String.t()}
  def from_env(env \\ System.get_env()) do
    vars = [cert: "OVERWORLD_TLS_CERT", key: "OVERWORLD_TLS_KEY", ca: "OVERWORLD_TLS_CA"]
    given = for {k, v} <- vars, path = env[v], path not in [nil, ""], do: {k, v, path}

    cond do
      given == [] ->
        {:ok, nil}

      length(given) < 3 ->
        missing = for {k, v} <- vars, not List.keymember?(given, k, 0), do: v

        {:error,
         "OVERWORLD_TLS_CERT, OVERWORLD_TLS_KEY and OVERWORLD_TLS_CA go together: " <>
           Enum.join(missing, ", ") <> " missing"}

      (bad = Enum.find(given, fn {_, _, path} -> not File.regular?(path) end)) != nil ->
        {_, v, path} = bad
        {:error, "#{v}: no such file: #{path}"}

      true ->
        {:ok, Map.new(given, fn {k, _, path} -> {k, Path.expand(path)} end)}
    end
  end

  @doc """
  Writes the distribution's TLS options file at `path` (read by the VM with
  `-ssl_dist_optfile`): both sides present the node's certificate and key, verify the peer's
  certificate against the CA, and a server refuses a client without one.
  """
  @spec optfile!(Path.t(), Path.t(), Path.t(), Path.t()) :: Path.t()
  def optfile!(path, cert, key, ca) do
    common = [
      certfile: to_charlist(Path.expand(cert)),
      keyfile: to_charlist(Path.expand(key)),
      cacertfile: to_charlist(Path.expand(ca)),
      verify: :verify_peer,
      secure_renegotiate: true
    ]

    terms = [server: common ++ [fail_if_no_peer_cert: true], client: common]
    File.mkdir_p!(Path.dirname(path))
    File.write!(path, :io_lib.format(~c"~p.~n", [terms]))
    path
  end

  @doc "The VM flags that choose TLS distribution with the options file `optfile`."
  @spec vm_args(Path.t()) :: String.t()
  def vm_args(optfile), do: "-proto_dist inet_tls -ssl_dist_optfile #{Path.expand(optfile)}"

  @doc "Whether this VM runs its distribution over TLS."
  @spec enabled?() :: boolean
  def enabled?, do: :init.get_argument(:proto_dist) == {:ok, [[~c"inet_tls"]]}

  @doc """
  Makes, in `dir`, a CA and one certificate (with its key) for nodes on `127.0.0.1` /
  `localhost`, with the `openssl` command; keys are mode 0600. For a cluster on one machine:
  answers the files. Made once: existing files are kept.
  """
  @spec dev_certs!(Path.t()) :: files
  def dev_certs!(dir) do
    File.mkdir_p!(dir)

    files = %{
      cert: Path.join(dir, "node.pem"),
      key: Path.join(dir, "node.key"),
      ca: Path.join(dir, "ca.pem")
    }

    unless Enum.all?(Map.values(files), &File.exists?/1) do
      openssl = System.find_executable("openssl") || raise "no openssl on the PATH"
      ext = Path.join(dir, "node.ext")
      File.write!(ext, "subjectAltName=DNS:127.0.0.1,IP:127.0.0.1,DNS:localhost\n")

      run!(
        openssl,
        ~w(req -x509 -newkey rsa:2048 -nodes -days 365 -subj /CN=overworld-dev-ca) ++
          ["-keyout", Path.join(dir, "ca.key"), "-out", files.ca]
      )

      run!(
        openssl,
        ~w(req -newkey rsa:2048 -nodes -subj /CN=overworld-node) ++
          ["-keyout", files.key, "-out", Path.join(dir, "node.csr")]
      )

      run!(
        openssl,
        ~w(x509 -req -days 365 -CAcreateserial) ++
          ["-in", Path.join(dir, "node.csr"), "-CA", files.ca, "-CAkey", Path.join(dir, "ca.key")] ++
          ["-extfile", ext, "-out", files.cert]
      )

      for key <- [files.key, Path.join(dir, "ca.key")], do: File.chmod!(key, 0o600)
    end

    files
  end

  defp run!(exe, args) do
    case System.cmd(exe, args, stderr_to_stdout: true) do
      {_, 0} -> :ok
      {out, status} -> raise "openssl #{hd(args)} failed (#{status}): #{out}"
    end
  end
end
