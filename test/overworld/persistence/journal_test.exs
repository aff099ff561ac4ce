defmodule Overworld.Persistence.JournalTest do
  use ExUnit.Case, async: true
  import ExUnit.CaptureLog
  import Bitwise

  alias Overworld.Persistence.Journal
  alias Overworld.Test.Prop

  doctest Journal

  @moduletag :tmp_dir

  defp events(n), do: for(i <- 1..n, do: {:picked_up, "player-#{rem(i, 7)}", i, %{loot: i * 3}})

  defp write(path, events) do
    {:ok, j} = Journal.open(path)
    for e <- events, do: {:ok, _} = Journal.sync_append(j, e)
    :ok = Journal.close(j)
    File.read!(path)
  end

  # Byte offsets where each record ends (after the 8-byte header).
  defp boundaries(events) do
    Enum.scan(events, 8, fn e, at -> at + 8 + byte_size(:erlang.term_to_binary(e)) end)
  end

  @header <<"OWJ", 1, 0, 0, 0, 0>>

  # Records of varied sizes (payloads of a few bytes to 2 KB), one of them carrying a whole
  # journal of its own (a header and a valid record: a reader that lost the framing would
  # find them).
  # The varied events written to a journal `name` in `dir`: {events, the file's bytes, the
  # offset where each record ends}.
  defp varied_journal(dir, name) do
    evs = varied()
    {evs, write(Path.join(dir, name), evs), boundaries(evs)}
  end

  defp varied do
    inner = :erlang.term_to_binary({:inside, 1})
    nested = @header <> <<byte_size(inner)::32, :erlang.crc32(inner)::32>> <> inner

    [
      :a,
      [],
      {:picked_up, "ann", 7, %{loot: 21}},
      :binary.copy(<<0xA5>>, 2_000),
      {:nested, nested},
      "",
      Map.new(1..30, &{&1, "player-#{&1}"}),
      {:left, "ann"}
    ]
  end

  # What reading the first `cut` bytes of the journal of `evs` must answer: the records wholly
  # before the cut, and where and why it stopped.
  defp after_cut(_evs, _ends, 0), do: {:ok, [], :complete}

  defp after_cut(_evs, _ends, cut) when cut < 8,
    do: {:ok, [], {:stopped_at, 0, :torn_file_header}}

  defp after_cut(evs, ends, cut) do
    whole = Enum.count(ends, &(&1 <= cut))
    last = if whole == 0, do: 8, else: Enum.at(ends, whole - 1)

    ending =
      cond do
        cut == last -> :complete
        cut - last < 8 -> {:stopped_at, last, :torn_header}
        true -> {:stopped_at, last, :torn_payload}
      end

    {:ok, Enum.take(evs, whole), ending}
  end

  defp flip(bin, at, bit) do
    <<pre::binary-size(at), byte, post::binary>> = bin
    <<pre::binary, bxor(byte, 1 <<< bit), post::binary>>
  end

  # A sync hook (the `:sync` option) that holds every group commit's fsync until the test
  # says: the writer reports `{:sync_held, writer}` and waits for `{:sync_go, action}` (`:ok`:
  # the real fsync; an error: the fsync fails with it).
  defp held_sync(test) do
    fn io ->
      send(test, {:sync_held, self()})

      receive do
        {:sync_go, :ok} -> :file.datasync(io)
        {:sync_go, error} -> error
      end
    end
  end

  defp release(writer, action \\ :ok), do: send(writer, {:sync_go, action})

  # `Journal.sync/1` from another process (it waits for the commit, held or not): the test
  # hears `{:synced, result}`.
  defp sync_from_elsewhere(j) do
    test = self()

    spawn(fn ->
      result =
        try do
          Journal.sync(j)
        catch
          :exit, reason -> {:exit, reason}
        end

      send(test, {:synced, result})
    end)
  end

  # Until the writer has numbered `n` records (appends from other processes are in).
  defp wait_seq(j, n) do
    unless :sys.get_state(j).seq >= n do
      Process.sleep(5)
      wait_seq(j, n)
    end
  end

  # The `{:journal_synced, ref, seq}` messages in the mailbox now, in the order they came.
  defp synced_messages(acc \\ []) do
    receive do
      {:journal_synced, ref, seq} -> synced_messages([{ref, seq} | acc])
    after
      0 -> Enum.reverse(acc)
    end
  end

  test "appends are numbered, survive a reopen, and continue after it", %{tmp_dir: dir} do
    path = Path.join(dir, "zone.journal")
    {:ok, j} = Journal.open(path)
    assert {:ok, 1} = Journal.sync_append(j, :a)
    assert {:ok, 2} = Journal.sync_append(j, {:b, "two"})
    :ok = Journal.close(j)

    {:ok, j} = Journal.open(path)
    assert {:ok, 3} = Journal.sync_append(j, [:c])
    :ok = Journal.close(j)
    assert Journal.read(path) == {:ok, [:a, {:b, "two"}, [:c]], :complete}
  end

  test "group commit: concurrent appenders share fsyncs, and every acknowledged event is on disk",
       %{tmp_dir: dir} do
    path = Path.join(dir, "group.journal")
    {:ok, j} = Journal.open(path, commit_ms: 5)

    acked =
      1..200
      |> Task.async_stream(fn i -> {i, Journal.sync_append(j, {:event, i})} end,
        max_concurrency: 50
      )
      |> Enum.map(fn {:ok, {i, {:ok, seq}}} -> {i, seq} end)

    stats = Journal.stats(j)
    :ok = Journal.close(j)
    # Sequence numbers are 1..200, each once.
    assert acked |> Enum.map(&elem(&1, 1)) |> Enum.sort() == Enum.to_list(1..200)
    assert stats.records == 200
    assert stats.syncs < 100, "#{inspect(stats)}: no grouping"
    {:ok, read, :complete} = Journal.read(path)
    # In sequence order, every acknowledged event.
    by_seq = acked |> Enum.sort_by(&elem(&1, 1)) |> Enum.map(fn {i, _} -> {:event, i} end)
    assert read == by_seq
  end

  test "the notify message comes only once the record is synced", %{tmp_dir: dir} do
    path = Path.join(dir, "notify.journal")
    # A long commit interval: a loaded machine may pause this test for tens of ms, and the
    # checks below must still fall inside it.
    {:ok, j} = Journal.open(path, commit_ms: 600)
    ref = make_ref()
    {:ok, 1} = Journal.append(j, :durable, notify: ref)
    # Within the commit interval nothing is acknowledged (and nothing is on disk yet).
    refute_receive {:journal_synced, ^ref, 1}, 50
    assert {:ok, [], :complete} = Journal.read(path)
    assert_receive {:journal_synced, ^ref, 1}, 3_000
    assert {:ok, [:durable], :complete} = Journal.read(path)
    :ok = Journal.close(j)
  end

  test "notify/2: at once when nothing waits for an fsync, else after the fsync of every " <>
         "record appended before it, by any process",
       %{tmp_dir: dir} do
    path = Path.join(dir, "notify2.journal")
    {:ok, j} = Journal.open(path, commit_ms: 1_000)
    ref = make_ref()
    :ok = Journal.notify(j, ref)
    assert_receive {:journal_synced, ^ref, 0}, 50

    # Another process appends (and is gone), then we ask.
    Task.await(Task.async(fn -> :ok = Journal.append_async(j, :theirs, nil) end))
    ref = make_ref()
    :ok = Journal.notify(j, ref)
    refute_receive {:journal_synced, ^ref, _}, 30
    assert {:ok, [], :complete} = Journal.read(path)
    assert_receive {:journal_synced, ^ref, 1}, 3_000
    assert {:ok, [:theirs], :complete} = Journal.read(path)
    :ok = Journal.close(j)
  end

  test "the acknowledgements of one group commit go out in the order they were asked",
       %{tmp_dir: dir} do
    {:ok, j} = Journal.open(Path.join(dir, "order.journal"), commit_ms: 1_000)
    refs = for i <- 1..20, do: {i, make_ref()}

    for {i, ref} <- refs do
      if rem(i, 3) == 0,
        do: :ok = Journal.notify(j, ref),
        else: :ok = Journal.append_async(j, {:event, i}, ref)
    end

    :ok = Journal.sync(j)
    got = for _ <- refs, do: assert_receive({:journal_synced, ref, _}, 3_000) && ref
    assert got == Enum.map(refs, &elem(&1, 1))
    :ok = Journal.close(j)
  end

  test "a tail cut at any byte of the last records: exactly the whole records before the cut",
       %{tmp_dir: dir} do
    evs = events(10)
    bin = write(Path.join(dir, "cut.journal"), evs)
    ends = boundaries(evs)
    assert List.last(ends) == byte_size(bin)
    from = Enum.at(ends, 6)

    for cut <- from..byte_size(bin) do
      whole = Enum.count(ends, &(&1 <= cut))
      {:ok, read, ending} = Journal.decode(binary_part(bin, 0, cut))
      assert read == Enum.take(evs, whole), "cut at #{cut}"

      if cut in ends,
        do: assert(ending == :complete),
        else:
          assert({:stopped_at, _, reason} = ending) &&
            assert(reason in [:torn_header, :torn_payload])
    end
  end

  test "a journal cut at every byte, its header included: exactly the whole records before " <>
         "the cut, never a partial or garbage one",
       %{tmp_dir: dir} do
    {evs, bin, ends} = varied_journal(dir, "whole.journal")
    assert List.last(ends) == byte_size(bin)
    copy = Path.join(dir, "cut.journal")

    for cut <- 0..byte_size(bin) do
      File.write!(copy, binary_part(bin, 0, cut))
      expected = after_cut(evs, ends, cut)
      assert Journal.read(copy) == expected, "cut at #{cut}"
      assert Journal.decode(binary_part(bin, 0, cut)) == expected, "cut at #{cut}"
    end
  end

  test "reopening a journal cut anywhere, its header included: appends go after the whole " <>
         "records before the cut",
       %{tmp_dir: dir} do
    {evs, bin, ends} = varied_journal(dir, "whole.journal")
    copy = Path.join(dir, "cut.journal")

    # Every byte of the file header, and around every record's end (inside the next record's
    # header, at its payload's first byte, in its payload).
    cuts =
      Enum.uniq(
        Enum.to_list(0..9) ++
          for(e <- ends, d <- [-1, 0, 1, 7, 8, 9], e + d <= byte_size(bin), do: e + d)
      )

    for cut <- cuts do
      File.write!(copy, binary_part(bin, 0, cut))
      whole = Enum.count(ends, &(&1 <= cut))

      capture_log(fn ->
        {:ok, j} = Journal.open(copy, commit_ms: 0)
        assert {:ok, seq} = Journal.sync_append(j, :after)
        assert seq == whole + 1, "cut at #{cut}"
        :ok = Journal.close(j)
      end)

      assert Journal.read(copy) == {:ok, Enum.take(evs, whole) ++ [:after], :complete},
             "cut at #{cut}"
    end
  end

  test "reopening a torn journal cuts the tail, warns, and appends after the valid records",
       %{tmp_dir: dir} do
    path = Path.join(dir, "torn.journal")
    evs = events(5)
    bin = write(path, evs)
    File.write!(path, binary_part(bin, 0, byte_size(bin) - 3))

    log =
      capture_log(fn ->
        {:ok, j} = Journal.open(path)
        assert {:ok, 5} = Journal.sync_append(j, :after)
        :ok = Journal.close(j)
      end)

    assert log =~ "tail cut"
    assert Journal.read(path) == {:ok, Enum.take(evs, 4) ++ [:after], :complete}
  end

  test "bit flips (property): decoding never raises and never applies a corrupt record",
       %{tmp_dir: dir} do
    evs = events(40)
    bin = write(Path.join(dir, "flips.journal"), evs)
    size = byte_size(bin)
    ends = boundaries(evs)

    Prop.check(
      :proper.forall(
        :proper_types.non_empty(
          :proper_types.list(
            :proper_types.tuple([
              # The file header included.
              :proper_types.integer(0, size - 1),
              :proper_types.integer(0, 7)
            ])
          )
        ),
        fn flips ->
          flips = Enum.take(flips, 3)
          corrupt = Enum.reduce(flips, bin, fn {at, b}, acc -> flip(acc, at, b) end)
          # The first damaged byte (flips of the same bit cancel out).
          first =
            Enum.find(0..(size - 1), size, &(:binary.at(corrupt, &1) != :binary.at(bin, &1)))

          case Journal.decode(corrupt) do
            # A damaged file header refuses the file whole.
            {:error, :not_a_journal} ->
              first < 8

            # Else exactly the records wholly before the first damaged byte: the journal's
            # beginning, untouched.
            {:ok, read, ending} ->
              first >= 8 and read == Enum.take(evs, Enum.count(ends, &(&1 <= first))) and
                ending == :complete == (first == size)
          end
        end
      ),
      2_000
    )
  end

  test "every bit of a journal flipped, one at a time, header included: a damaged header " <>
         "refuses the file, a damaged record ends the reading just before it",
       %{tmp_dir: dir} do
    {evs, bin, ends} = varied_journal(dir, "every-bit.journal")

    for at <- 0..(byte_size(bin) - 1), bit <- 0..7 do
      corrupt = flip(bin, at, bit)

      if at < 8 do
        assert Journal.decode(corrupt) == {:error, :not_a_journal}, "bit #{bit} of byte #{at}"
      else
        whole = Enum.count(ends, &(&1 <= at))
        start = if whole == 0, do: 8, else: Enum.at(ends, whole - 1)

        assert {:ok, read, {:stopped_at, ^start, reason}} = Journal.decode(corrupt),
               "bit #{bit} of byte #{at}"

        assert read == Enum.take(evs, whole), "bit #{bit} of byte #{at}"
        assert reason in [:bad_checksum, :bad_length, :torn_payload]
      end
    end

    # A header-only journal and a torn header, damaged: refused too (not a torn tail).
    for prefix <- 1..8, at <- 0..(prefix - 1), bit <- 0..7 do
      assert Journal.decode(flip(binary_part(@header, 0, prefix), at, bit)) ==
               {:error, :not_a_journal}
    end
  end

  test "a journal with a damaged header is not opened, and not written to", %{tmp_dir: dir} do
    Process.flag(:trap_exit, true)
    bin = write(Path.join(dir, "whole.journal"), varied())
    path = Path.join(dir, "damaged.journal")

    for at <- 0..7, bit <- 0..7 do
      corrupt = flip(bin, at, bit)
      File.write!(path, corrupt)
      assert Journal.read(path) == {:error, :not_a_journal}
      assert Journal.open(path) == {:error, {:not_a_journal, path}}
      assert_receive {:EXIT, _, {:not_a_journal, ^path}}
      assert File.read!(path) == corrupt
    end
  end

  test "what is not a journal is refused; an empty or missing file is an empty journal",
       %{tmp_dir: dir} do
    assert Journal.decode("OWX" <> <<1, 0, 0, 0, 0>>) == {:error, :not_a_journal}
    assert Journal.decode(<<>>) == {:ok, [], :complete}
    assert Journal.read(Path.join(dir, "missing")) == {:ok, [], :complete}
    # A length beyond the maximum stops reading (no huge allocation).
    assert {:ok, [], {:stopped_at, 8, :bad_length}} =
             Journal.decode(<<"OWJ", 1, 0, 0, 0, 0, 0xFFFFFFFF::32, 0::32, "x">>)

    assert_raise ArgumentError, ~r/:commit_ms/, fn ->
      Journal.open(Path.join(dir, "x"), commit_ms: -1)
    end
  end

  test "no acknowledgement before the fsync that covers it: while it is held none leaves; " <>
         "released, all of them, in order, and the records are on disk",
       %{tmp_dir: dir} do
    path = Path.join(dir, "held.journal")
    # A commit only when the test asks for one (Journal.sync/1), and its fsync held.
    {:ok, j} = Journal.open(path, commit_ms: 60_000, sync: held_sync(self()))
    [r1, r2, r7, rn, r8, rn2] = for _ <- 1..6, do: make_ref()

    {:ok, 1} = Journal.append(j, {:e, 1}, notify: r1)
    :ok = Journal.append_async(j, {:e, 2}, r2)
    {:ok, 3} = Journal.append(j, {:e, 3})
    # Three appenders that wait (sync_append/2), each in its own process.
    waiters = for i <- 4..6, do: Task.async(fn -> Journal.sync_append(j, {:e, i}, 30_000) end)
    wait_seq(j, 6)
    {:ok, 7} = Journal.append(j, {:e, 7}, notify: r7)
    :ok = Journal.notify(j, rn)

    sync_from_elsewhere(j)
    assert_receive {:sync_held, ^j}, 5_000
    # The commit is written (the file holds its records) but its fsync has not returned: no
    # acknowledgement of any kind has left.
    assert {:ok, written, :complete} = Journal.read(path)
    assert length(written) == 7
    # What arrives while the fsync is held belongs to the next commit.
    :ok = Journal.append_async(j, {:e, 8}, r8)
    :ok = Journal.notify(j, rn2)
    refute_receive {:journal_synced, _, _}, 200
    assert Task.yield_many(waiters, 0) |> Enum.map(&elem(&1, 1)) == [nil, nil, nil]
    refute_received {:synced, _}

    release(j)
    assert_receive {:synced, :ok}, 5_000
    # All of this commit's, in the order they were asked; nothing for the next one's.
    assert synced_messages() == [{r1, 1}, {r2, 2}, {r7, 7}, {rn, 7}]
    waited = Task.await_many(waiters, 5_000)
    assert waited |> Enum.map(fn {:ok, seq} -> seq end) |> Enum.sort() == [4, 5, 6]

    # The next commit: held again, then released.
    sync_from_elsewhere(j)
    assert_receive {:sync_held, ^j}, 5_000
    refute_receive {:journal_synced, _, _}, 100
    release(j)
    assert_receive {:synced, :ok}, 5_000
    assert synced_messages() == [{r8, 8}, {rn2, 8}]

    stats = Journal.stats(j)
    :ok = Journal.close(j)
    assert stats == %{records: 8, syncs: 2}
    # On disk, in sequence order (the waiters' records where their numbers say).
    by_seq =
      Map.new(Enum.zip(Enum.map(waited, fn {:ok, s} -> s end), 4..6), fn {s, i} ->
        {s, {:e, i}}
      end)

    expected = for s <- 1..8, do: Map.get(by_seq, s, {:e, s})
    assert Journal.read(path) == {:ok, expected, :complete}
  end

  test "a failed fsync: no acknowledgement ever leaves for what it covered; its callers hear " <>
         "of the failure and the writer stops",
       %{tmp_dir: dir} do
    Process.flag(:trap_exit, true)
    path = Path.join(dir, "failed.journal")
    {:ok, j} = Journal.open(path, commit_ms: 60_000, sync: held_sync(self()))

    # A first commit that succeeds.
    r1 = make_ref()
    {:ok, 1} = Journal.append(j, {:e, 1}, notify: r1)
    sync_from_elsewhere(j)
    assert_receive {:sync_held, ^j}, 5_000
    release(j)
    assert_receive {:synced, :ok}, 5_000
    assert synced_messages() == [{r1, 1}]

    # A second one whose fsync fails.
    [r2, r3, rn] = for _ <- 1..3, do: make_ref()
    :ok = Journal.append_async(j, {:e, 2}, r2)
    {:ok, 3} = Journal.append(j, {:e, 3}, notify: r3)
    waiter = Task.async(fn -> Journal.sync_append(j, {:e, 4}, 30_000) end)
    wait_seq(j, 4)
    :ok = Journal.append_async(j, {:e, 5}, nil)
    :ok = Journal.notify(j, rn)
    sync_from_elsewhere(j)
    assert_receive {:sync_held, ^j}, 5_000

    log =
      capture_log(fn ->
        release(j, {:error, :eio})
        assert_receive {:EXIT, ^j, {:shutdown, {:journal_failed, :eio}}}, 5_000
      end)

    assert log =~ "write failed (:eio): the writer stops"
    refute Process.alive?(j)
    # The writer is gone (its exit came after every message it sent): whatever it told us is
    # in the mailbox. Failures, in the order asked, and not one acknowledgement.
    assert synced_messages() == []

    failed =
      for _ <- 1..3 do
        assert_received {:journal_failed, ref, :eio}
        ref
      end

    assert failed == [r2, r3, rn]
    assert Task.await(waiter, 5_000) == {:error, :eio}
    assert_receive {:synced, {:exit, _}}, 5_000
    # What was acknowledged is on disk.
    assert {:ok, [{:e, 1} | _], _} = Journal.read(path)
  end

  test "the :sync option is checked", %{tmp_dir: dir} do
    assert_raise ArgumentError, ~r/:sync/, fn ->
      Journal.open(Path.join(dir, "x"), sync: fn _io, _extra -> :ok end)
    end

    assert_raise ArgumentError, ~r/unknown option :synk/, fn ->
      Journal.open(Path.join(dir, "x"), synk: &:file.datasync/1)
    end
  end
end
