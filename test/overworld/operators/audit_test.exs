defmodule Overworld.Operators.AuditTest do
  # The audit log's writer alone: lines on disk before the answer, read back newest first,
  # surviving a restart of the writer (and a line torn by a crash), rotated at its size.
  use ExUnit.Case, async: true

  alias Overworld.Operators.Audit

  setup do
    dir = Path.join(Overworld.Test.DataDir.path(), "audit-#{System.unique_integer([:positive])}")
    on_exit(fn -> File.rm_rf(dir) end)
    server = :"audit_test_#{System.unique_integer([:positive])}"

    settings = %{
      audit_file: Path.join(dir, "audit.log"),
      audit_max_bytes: 100_000,
      audit_files: 2
    }

    %{server: server, settings: settings}
  end

  defp entry(i),
    do: %{
      operator: "alice",
      action: "kick",
      target: "user-#{i}",
      result: "ok",
      address: "10.0.0.1"
    }

  test "written, read back newest first, after a restart of the writer too", %{
    server: s,
    settings: st
  } do
    start_supervised!({Audit, {s, st}})
    for i <- 1..3, do: :ok = Audit.log(s, entry(i))
    # On disk at the answer: read from the file.
    assert ["user-3", "user-2", "user-1"] = Audit.read(st, 10) |> Enum.map(& &1["target"])

    assert [
             %{
               "at" => at,
               "operator" => "alice",
               "action" => "kick",
               "result" => "ok",
               "address" => "10.0.0.1"
             }
           ] = Audit.read(st, 1)

    assert {:ok, _, 0} = DateTime.from_iso8601(at)

    stop_supervised!(Audit)
    # A crash tore the last line.
    File.write!(st.audit_file, ~s({"at":"2024-01-01T00:00:00Z","acti), [:append])
    start_supervised!({Audit, {s, st}})
    :ok = Audit.log(s, %{operator: nil, action: "login", result: "invalid_credentials"})

    assert [
             %{"action" => "login", "operator" => nil, "target" => nil},
             %{"target" => "user-3"} | _
           ] = Audit.read(st, 10)

    assert length(Audit.read(st, 10)) == 4
  end

  test "rotated at its size: the newest files kept, read across them", %{server: s, settings: st} do
    st = %{st | audit_max_bytes: 1_024}
    start_supervised!({Audit, {s, st}})
    for i <- 1..40, do: :ok = Audit.log(s, entry(i))

    assert File.stat!(st.audit_file).size <= 1_024
    assert File.exists?(st.audit_file <> ".1") and File.exists?(st.audit_file <> ".2")
    refute File.exists?(st.audit_file <> ".3")
    targets = Audit.read(st, 100) |> Enum.map(& &1["target"])
    # Newest first, with no gap, back to the oldest line kept.
    assert hd(targets) == "user-40"
    n = length(targets)
    assert targets == for(i <- 40..(41 - n)//-1, do: "user-#{i}")
    assert n < 40
  end

  test "a writer that is not running: an error, logged", %{server: s} do
    assert ExUnit.CaptureLog.capture_log(fn ->
             assert Audit.log(s, entry(1)) == {:error, :audit_unavailable}
           end) =~ "not written"
  end
end
