defmodule Overworld.Storage.PostgresTest do
  # The storage contract against a real PostgreSQL server (Overworld.Bench.PostgresServer).
  use ExUnit.Case, async: true
  use Overworld.Test.StorageContract

  alias Overworld.Bench.PostgresServer, as: Server

  setup_all do
    server = Server.start!()
    on_exit(fn -> Server.stop(server) end)

    pool = [
      host: server.host,
      port: server.port,
      database: server.database,
      user: server.user,
      password: server.password,
      size: 8
    ]

    start_supervised!(
      {Overworld.Storage,
       name: :contract_postgres,
       adapter: Overworld.Storage.Postgres,
       adapter_options: [pool: pool]}
    )

    %{store: :contract_postgres}
  end
end
