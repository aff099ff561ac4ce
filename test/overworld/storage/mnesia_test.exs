defmodule Overworld.Storage.MnesiaTest do
  # Mnesia is one per node: these tests share it with every other test file (and so run alone).
  use ExUnit.Case, async: false
  use Overworld.Test.StorageContract

  alias Overworld.Test.DataDir

  setup_all do
    :ok = Overworld.Accounts.start(DataDir.path())
    start_supervised!({Overworld.Storage, name: :contract_mnesia})
    %{store: :contract_mnesia}
  end
end
