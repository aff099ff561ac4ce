defmodule Overworld.Cluster.TLSTest do
  use ExUnit.Case, async: true
  @moduletag :tmp_dir
  doctest Overworld.Cluster.TLS

  alias Overworld.Cluster.TLS

  test "the development certificates and the options file make a TLS connection that verifies both sides",
       %{tmp_dir: tmp} do
    files = TLS.dev_certs!(Path.join(tmp, "tls"))
    assert File.stat!(files.key).mode |> Bitwise.band(0o777) == 0o600
    optfile = TLS.optfile!(Path.join(tmp, "dist.conf"), files.cert, files.key, files.ca)
    assert TLS.vm_args(optfile) == "-proto_dist inet_tls -ssl_dist_optfile #{optfile}"

    # The file is what the VM reads: Erlang terms, a server and a client side.
    {:ok, [opts]} = :file.consult(optfile)
    server = Keyword.fetch!(opts, :server)
    client = Keyword.fetch!(opts, :client)
    assert server[:verify] == :verify_peer and server[:fail_if_no_peer_cert] == true
    assert client[:verify] == :verify_peer

    {:ok, _} = Application.ensure_all_started(:ssl)
    {:ok, listen} = :ssl.listen(0, [:binary, active: false] ++ server)
    {:ok, {_, port}} = :ssl.sockname(listen)
    me = self()

    spawn_link(fn ->
      {:ok, t} = :ssl.transport_accept(listen)
      send(me, {:server, :ssl.handshake(t, 5_000)})
    end)

    # A client with the cluster's certificate gets in (the host name checked: 127.0.0.1).
    assert {:ok, conn} =
             :ssl.connect(~c"127.0.0.1", port, [:binary, active: false] ++ client, 5_000)

    assert_receive {:server, {:ok, _}}, 5_000
    :ssl.close(conn)

    # A client without a certificate does not.
    spawn_link(fn ->
      {:ok, t} = :ssl.transport_accept(listen)
      send(me, {:server, :ssl.handshake(t, 5_000)})
    end)

    anonymous = [verify: :verify_none]
    _ = :ssl.connect(~c"127.0.0.1", port, [:binary, active: false] ++ anonymous, 5_000)
    assert_receive {:server, {:error, _}}, 5_000
  end

  test "from_env: the three files together, each existing", %{tmp_dir: tmp} do
    pem = Path.join(tmp, "x.pem")
    File.write!(pem, "")
    all = %{"OVERWORLD_TLS_CERT" => pem, "OVERWORLD_TLS_KEY" => pem, "OVERWORLD_TLS_CA" => pem}
    assert {:ok, %{cert: ^pem, key: ^pem, ca: ^pem}} = TLS.from_env(all)

    assert {:error, "OVERWORLD_TLS_CA: no such file: /nonexistent"} =
             TLS.from_env(%{all | "OVERWORLD_TLS_CA" => "/nonexistent"})
  end
end
