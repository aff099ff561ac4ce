defmodule Overworld.Sidecar.ShmTest do
  # The shared segment's NIF (Overworld.Sidecar.Shm): copies in and out, the sequence locks,
  # the checks of its arguments, and a file truncated or grown by the other process (the fstat
  # check, and the SIGBUS handler for a copy that faults) — the node keeps running throughout.
  #
  # OW_SHM_BENCH=1 mix test test/overworld/sidecar/shm_test.exs also prints the times of
  # publish_bodies/6 and consume_results/6 (not asserted).
  use ExUnit.Case, async: true

  import Bitwise

  alias Overworld.Sidecar.Shm

  # A bignum of eight 64-bit digits, each 0x1F: boxed like a tuple but not one. Read as a tuple,
  # its header would be an arity of 8 and each digit a small integer (1), so the NIF's own reading
  # of tuples must tell it from one by its header.
  @tuple_like Enum.reduce(0..7, 0, fn k, acc -> acc + (0x1F <<< (64 * k)) end)

  @size 64 * 1024

  setup_all do
    :ok = Shm.load()
    :ok
  end

  setup do
    path = "/dev/shm/overworld_shm_test_#{System.pid()}_#{System.unique_integer([:positive])}"
    on_exit(fn -> File.rm(path) end)
    {:ok, shm} = Shm.create(path, @size)
    %{path: path, shm: shm}
  end

  defp words(binary), do: for(<<w::64-little-signed <- binary>>, do: w)

  defp truncate!(path, size) do
    {_, 0} = System.cmd("truncate", ["-s", Integer.to_string(size), path])
    :ok
  end

  describe "load/0 and create/2" do
    test "load/0 is :ok again once loaded" do
      assert Shm.load() == :ok
    end

    test "a new segment: the file is sized, private to its owner and all zeros", %{
      path: path,
      shm: shm
    } do
      assert Shm.size(shm) == {:ok, @size, @size}
      assert %File.Stat{size: @size, access: :read_write} = File.stat!(path)
      assert Bitwise.band(File.stat!(path).mode, 0o777) == 0o600
      assert Shm.read(shm, 0, @size) == {:ok, :binary.copy(<<0>>, @size)}
    end

    test "create/2 truncates an existing file to the size asked for", %{path: path} do
      File.write!(path, :binary.copy("x", 100))
      assert {:ok, shm} = Shm.create(path, 128)
      assert Shm.size(shm) == {:ok, 128, 128}
      assert Shm.read(shm, 0, 128) == {:ok, <<0::1024>>}
    end

    test "sizes: positive multiples of 64 up to 1 GiB; other integers {:error, :size}", %{
      path: path
    } do
      for size <- [0, -64, 100, 65, (1 <<< 30) + 64, 1 <<< 64, 1 <<< 100] do
        assert Shm.create(path, size) == {:error, :size}, "size #{size}"
      end

      assert {:ok, shm} = Shm.create(path, 64)
      assert Shm.size(shm) == {:ok, 64, 64}
      # The largest (sparse: no page is touched).
      assert {:ok, shm} = Shm.create(path, 1 <<< 30)
      assert Shm.size(shm) == {:ok, 1 <<< 30, 1 <<< 30}
      assert Shm.close(shm) == :ok
    end

    test "bad terms are badarg", %{path: path} do
      for {p, size} <- [
            {String.to_charlist(path), 64},
            {:atom, 64},
            {"", 64},
            {path <> <<0>> <> "x", 64},
            {String.duplicate("a", 5000), 64},
            {path, 64.0},
            {path, "64"}
          ] do
        assert_raise ArgumentError, fn -> Shm.create(p, size) end
      end
    end

    test "POSIX errors are atoms; a symbolic link is refused", %{path: path} do
      assert Shm.create("/nonexistent-dir/overworld_shm", 64) == {:error, :enoent}

      link = path <> "_link"
      on_exit(fn -> File.rm(link) end)
      File.write!(path, "keep")
      File.ln_s!(path, link)
      assert Shm.create(link, 64) == {:error, :eloop}
      assert File.read!(path) == "keep"
    end
  end

  describe "write/3, read/3, close/1" do
    test "round trip, binaries and iodata", %{shm: shm} do
      assert Shm.write(shm, 0, "OWSS") == :ok
      assert Shm.write(shm, 4, [<<1::32-little>>, ["ab", ?c], <<>>]) == :ok
      assert Shm.read(shm, 0, 11) == {:ok, <<"OWSS", 1::32-little, "abc">>}
      assert Shm.write(shm, @size - 3, "end") == :ok
      assert Shm.read(shm, @size - 5, 5) == {:ok, <<0, 0, "end">>}
      assert Shm.read(shm, 7, 0) == {:ok, ""}
      assert Shm.read(shm, @size, 0) == {:ok, ""}
    end

    test "offsets and lengths outside the mapping are {:error, :bounds}, whatever the integer",
         %{shm: shm} do
      huge = [1 <<< 63, (1 <<< 64) - 1, 1 <<< 64, 1 <<< 200]

      for offset <- [@size + 1, -1, -(1 <<< 70) | huge] do
        assert Shm.read(shm, offset, 1) == {:error, :bounds}, "offset #{offset}"
        assert Shm.write(shm, offset, "x") == {:error, :bounds}, "offset #{offset}"
      end

      for {offset, len} <-
            [{0, @size + 1}, {@size, 1}, {1, @size}, {8, -1}] ++
              for(l <- huge, do: {8, l}) do
        assert Shm.read(shm, offset, len) == {:error, :bounds}, "#{offset}, #{len}"
      end

      assert Shm.write(shm, @size - 1, "xy") == {:error, :bounds}
      assert Shm.write(shm, @size, "") == :ok
      # Nothing was written.
      assert Shm.read(shm, 0, @size) == {:ok, :binary.copy(<<0>>, @size)}
    end

    test "bad terms are badarg, and the node goes on", %{shm: shm} do
      bad_calls = [
        fn -> Shm.read(make_ref(), 0, 1) end,
        fn -> Shm.read(:shm, 0, 1) end,
        fn -> Shm.read(shm, 1.0, 1) end,
        fn -> Shm.read(shm, 0, :one) end,
        fn -> Shm.write(shm, 0, :data) end,
        fn -> Shm.write(shm, 0, ["a", :c]) end,
        fn -> Shm.write(shm, 0, ["a" | :b]) end,
        fn -> Shm.write(shm, 0, [256]) end,
        fn -> Shm.write(shm, "0", "x") end,
        fn -> Shm.size(self()) end,
        fn -> Shm.close(0) end
      ]

      for call <- bad_calls, do: assert_raise(ArgumentError, call)
      assert Shm.write(shm, 0, "ok") == :ok
    end

    test "close/1 unmaps now: later calls answer {:error, :closed}", %{shm: shm} do
      assert Shm.close(shm) == :ok
      assert Shm.close(shm) == :ok
      assert Shm.size(shm) == {:error, :closed}
      assert Shm.read(shm, 0, 8) == {:error, :closed}
      assert Shm.write(shm, 0, "x") == {:error, :closed}
      assert Shm.publish(shm, 64, 0, "", "") == {:error, :closed}
      assert Shm.publish_bodies(shm, 64, 1024, 0, 1, []) == {:error, :closed}
      assert Shm.consume(shm, 64, 0, 64) == {:error, :closed}
      assert Shm.consume_results(shm, 64, 1024, 0, 1, 0) == {:error, :closed}
    end

    test "close/1 while other processes copy: each copy is whole or :closed", %{shm: shm} do
      parent = self()

      readers =
        for _ <- 1..4 do
          spawn_link(fn ->
            results =
              Stream.repeatedly(fn -> Shm.read(shm, 0, @size) end)
              |> Enum.take_while(&match?({:ok, _}, &1))

            send(parent, {:done, self(), length(results)})
          end)
        end

      Process.sleep(20)
      assert Shm.close(shm) == :ok

      for pid <- readers do
        assert_receive {:done, ^pid, n} when n > 0, 5_000
      end

      assert Shm.read(shm, 0, 8) == {:error, :closed}
    end
  end

  describe "publish/5 and consume/4" do
    test "round trip: the region is seq + 2, its header words zero-padded, then the records",
         %{shm: shm} do
      records = for i <- 1..10, into: <<>>, do: <<i::64-little, -i::64-little-signed>>
      head = <<7::64-little, 10::64-little, 0::64-little, byte_size(records)::64-little>>
      assert Shm.write(shm, 64 + 8, :binary.copy(<<0xFF>>, 56)) == :ok
      assert Shm.publish(shm, 64, 0, head, records) == :ok

      assert {:ok, <<2::64-little, ^head::binary-32, 0::192, ^records::binary>>} =
               Shm.consume(shm, 64, 2, 64 + byte_size(records))

      # The next write starts from the new seq; the region holds the newest.
      assert Shm.publish(shm, 64, 2, [<<8::64-little>>], ["abc", "d"]) == :ok
      assert {:ok, <<4::64-little, 8::64-little, 0::384, "abcd">>} = Shm.consume(shm, 64, 4, 68)
      assert Shm.publish(shm, 64, 4, "", []) == :ok
      assert Shm.consume(shm, 64, 6, 8) == {:ok, <<6::64-little>>}
    end

    test "publish/5 from a seq the region does not hold writes nothing: {:error, :seq}", %{
      shm: shm
    } do
      assert Shm.publish(shm, 128, 2, "tick", "records") == {:error, :seq}
      assert Shm.read(shm, 128, 128) == {:ok, <<0::1024>>}
    end

    test "publish/5 arguments", %{shm: shm} do
      assert Shm.publish(shm, 65, 0, "", "") == {:error, :bounds}
      assert Shm.publish(shm, @size, 0, "", "") == {:error, :bounds}
      assert Shm.publish(shm, @size - 64, 0, "", "x") == {:error, :bounds}
      assert Shm.publish(shm, -64, 0, "", "") == {:error, :bounds}
      assert Shm.publish(shm, 1 <<< 64, 0, "", "") == {:error, :bounds}
      assert Shm.publish(shm, @size - 64, 0, :binary.copy("h", 56), "") == :ok

      for {seq, head, records} <- [
            {1, "", ""},
            {-2, "", ""},
            {1 <<< 64, "", ""},
            {(1 <<< 64) - 2, "", ""},
            {0, :binary.copy("h", 57), ""},
            {0, :header, ""},
            {0, "", [:records]}
          ] do
        assert_raise ArgumentError, fn -> Shm.publish(shm, 0, seq, head, records) end
      end

      assert Shm.read(shm, 0, 64) == {:ok, <<0::512>>}
    end

    test "consume/4 of a region being written (odd seq) is :torn; of another seq, :seq", %{
      shm: shm
    } do
      assert Shm.publish(shm, 64, 0, "", "records") == :ok
      assert {:ok, _} = Shm.consume(shm, 64, 2, 71)
      assert Shm.consume(shm, 64, 0, 71) == {:error, :seq}
      assert Shm.consume(shm, 64, 4, 71) == {:error, :seq}
      # A writer in the middle of its write.
      assert Shm.write(shm, 64, <<3::64-little>>) == :ok
      assert Shm.consume(shm, 64, 2, 71) == {:error, :torn}
      assert Shm.consume(shm, 64, 3, 71) == {:error, :torn}
      assert Shm.consume(shm, 64, 4, 71) == {:error, :torn}
    end

    test "consume/4 arguments", %{shm: shm} do
      assert Shm.consume(shm, 64, 0, 64) == {:ok, <<0::512>>}
      assert Shm.consume(shm, 32, 0, 64) == {:error, :bounds}
      assert Shm.consume(shm, 64, 0, 7) == {:error, :bounds}
      assert Shm.consume(shm, 64, 0, @size) == {:error, :bounds}
      assert Shm.consume(shm, @size, 0, 8) == {:error, :bounds}
      assert Shm.consume(shm, 64, 0, 1 <<< 64) == {:error, :bounds}
      assert Shm.consume(shm, -64, 0, 8) == {:error, :bounds}
      assert_raise ArgumentError, fn -> Shm.consume(shm, 64, -2, 8) end
      assert_raise ArgumentError, fn -> Shm.consume(shm, 64, :seq, 8) end
      assert_raise ArgumentError, fn -> Shm.consume(shm, 64, 0, 8.0) end
    end

    test "against a concurrent writer a copy is whole or :torn, never mixed", %{shm: shm} do
      # Each write fills the region (header and 16 KiB of records) with its own number k; a
      # copy that passes the sequence lock holds one k throughout.
      region = 1024
      words = 2048
      parent = self()

      writer =
        spawn_link(fn ->
          Stream.iterate(1, &(&1 + 1))
          |> Enum.reduce_while(0, fn k, seq ->
            receive do
              :stop -> {:halt, send(parent, {:writes, k - 1})}
            after
              0 ->
                head = :binary.copy(<<k::64-little>>, 7)
                :ok = Shm.publish(shm, region, seq, head, :binary.copy(<<k::64-little>>, words))
                {:cont, seq + 2}
            end
          end)
        end)

      counts =
        Enum.reduce(1..20_000, %{ok: 0, torn: 0}, fn _, acc ->
          {:ok, <<seq::64-little>>} = Shm.read(shm, region, 8)

          case Shm.consume(shm, region, seq, 64 + 8 * words) do
            {:ok, <<^seq::64-little, k::64-little, rest::binary>>} ->
              assert Enum.uniq(words(rest)) == [k], "a mixed copy at seq #{seq}"
              assert seq == 2 * k
              %{acc | ok: acc.ok + 1}

            {:error, :torn} ->
              %{acc | torn: acc.torn + 1}

            {:error, :seq} ->
              # The writer finished another write between the two reads.
              acc
          end
        end)

      send(writer, :stop)
      assert_receive {:writes, writes}, 5_000
      assert writes > 0
      assert counts.ok > 0
    end
  end

  describe "publish_bodies/6" do
    test "writes the documented little-endian layout", %{shm: shm} do
      min = -(1 <<< 63)
      max = (1 <<< 63) - 1

      bodies = [
        {1, 100, 200, -3, 4, 50, 1000},
        {max, min, 0, max, min, 1, -1},
        {42, -1_000_000, 1_000_000, 0, 0, 500, 70}
      ]

      assert Shm.publish_bodies(shm, 4096, 4096, 0, 77, bodies) == {:ok, 3}
      assert {:ok, region} = Shm.read(shm, 4096, 64 + 3 * 64 + 64)

      assert <<2::64-little, 77::64-little, 3::64-little, 0::64-little, 192::64-little, 0::192,
               records::binary-192, rest::binary-64>> = region

      assert rest == <<0::512>>

      parsed =
        for <<id::64-little-signed, x::64-little-signed, y::64-little-signed,
              vx::64-little-signed, vy::64-little-signed, r::64-little-signed,
              m::64-little-signed, zero::64-little-signed <- records>> do
          assert zero == 0
          {id, x, y, vx, vy, r, m}
        end

      assert parsed == bodies
      # consume/4 sees the same region; the next publish starts from seq 2.
      assert {:ok, ^region} = Shm.consume(shm, 4096, 2, 64 + 3 * 64 + 64)
      assert Shm.publish_bodies(shm, 4096, 4096, 2, 78, []) == {:ok, 0}

      assert {:ok,
              <<4::64-little, 78::64-little, 0::64-little, 0::64-little, 0::64-little, _::binary>>} =
               Shm.consume(shm, 4096, 4, 64)
    end

    test "a bad body is badarg and nothing is written", %{shm: shm} do
      good = {1, 2, 3, 4, 5, 6, 7}

      for bad <- [
            [good, {1, 2, 3, 4, 5, 6, 7.0}],
            [good, {1, 2, 3, 4, 5, 6, 1 <<< 63}],
            [good, {1, 2, 3, 4, 5, 6, -(1 <<< 63) - 1}],
            [good, {1, 2, 3, 4, 5, 6}],
            [good, {1, 2, 3, 4, 5, 6, 7, 8}],
            [good, [1, 2, 3, 4, 5, 6, 7]],
            [good, :body],
            [good | good],
            :bodies
          ] do
        assert_raise ArgumentError, fn -> Shm.publish_bodies(shm, 0, 4096, 0, 1, bad) end
      end

      for {seq, tick} <- [{1, 1}, {-2, 1}, {0, 1.0}, {0, 1 <<< 63}] do
        assert_raise ArgumentError, fn -> Shm.publish_bodies(shm, 0, 4096, seq, tick, [good]) end
      end

      assert Shm.read(shm, 0, 4096) == {:ok, :binary.copy(<<0>>, 4096)}
    end

    test "capacity: 64 + 64·n bytes in the region, the region in the mapping", %{shm: shm} do
      bodies = for i <- 1..10, do: {i, 0, 0, 0, 0, 1, 1}
      assert Shm.publish_bodies(shm, 0, 64 + 9 * 64, 0, 1, bodies) == {:error, :bounds}
      assert Shm.publish_bodies(shm, 0, 63, 0, 1, []) == {:error, :bounds}
      assert Shm.publish_bodies(shm, 32, 4096, 0, 1, bodies) == {:error, :bounds}
      assert Shm.publish_bodies(shm, @size - 512, 1024, 0, 1, []) == {:error, :bounds}
      assert Shm.publish_bodies(shm, 0, 1 <<< 64, 0, 1, []) == {:error, :bounds}
      assert Shm.publish_bodies(shm, -64, 1024, 0, 1, []) == {:error, :bounds}
      assert Shm.read(shm, 0, @size) == {:ok, :binary.copy(<<0>>, @size)}
      assert Shm.publish_bodies(shm, 0, 64 + 10 * 64, 0, 1, bodies) == {:ok, 10}
      assert Shm.publish_bodies(shm, 0, 64 + 10 * 64, 0, 1, bodies) == {:error, :seq}
    end
  end

  describe "publish_entities/7" do
    # Entities as the zone's records: {tag, id, kind, x, y, vx, vy, ...}.
    @spec_ {1, 3, 4, 5, 6, 512, 3, 600}

    defp ent(id, x, y, vx, vy), do: {:entity, id, :body, x, y, vx, vy, 0, nil}

    test "the records publish_bodies/6 writes for the same bodies, velocities limited", %{
      shm: shm
    } do
      cells = [
        {7, [ent(1, 10, -20, 700, -700), ent(2, 1 <<< 40, 5, 3, -4)]},
        {8, []},
        {9, [ent(3, -(1 <<< 62), 0, -601, 599)]}
      ]

      bodies = [
        {1, 10, -20, 600, -600, 512, 3},
        {2, 1 <<< 40, 5, 3, -4, 512, 3},
        {3, -(1 <<< 62), 0, -600, 599, 512, 3}
      ]

      assert Shm.publish_entities(shm, 0, 1024, 0, 42, cells, @spec_) == {:ok, 3}
      assert Shm.publish_bodies(shm, 4096, 1024, 0, 42, bodies) == {:ok, 3}
      assert Shm.read(shm, 8, 64 * 4 - 8) == Shm.read(shm, 4096 + 8, 64 * 4 - 8)
      assert Shm.publish_entities(shm, 0, 1024, 2, 43, [], @spec_) == {:ok, 0}
      assert {:ok, <<4::64-little, 43::64-little, 0::64>>} = Shm.read(shm, 0, 24)
    end

    test "thousands of entities (the buffer they are decoded into grows), then a few", %{
      path: path
    } do
      on_exit(fn -> File.rm(path <> ".big") end)
      {:ok, shm} = Shm.create(path <> ".big", 64 + 64 * 2_500)
      entities = for i <- 1..2_500, do: ent(i, i * 7, -i, rem(i, 900) - 450, 3)
      cells = Enum.chunk_every(entities, 9) |> Enum.with_index(fn l, k -> {k, l} end)
      len = 64 + 64 * 2_500

      expected =
        for {:entity, id, :body, x, y, vx, vy, _, _} <- entities,
            into: <<>>,
            do:
              <<id::64-little, x::64-little, y::64-little-signed, vx::64-little-signed,
                vy::64-little, 512::64-little, 3::64-little, 0::64>>

      assert Shm.publish_entities(shm, 0, len, 0, 1, cells, @spec_) == {:ok, 2_500}
      assert Shm.read(shm, 64, 64 * 2_500) == {:ok, expected}
      assert Shm.publish_entities(shm, 0, len, 2, 2, Enum.take(cells, 1), @spec_) == {:ok, 9}
      assert {:ok, <<4::64-little, 2::64-little, 9::64-little>>} = Shm.read(shm, 0, 24)
      assert Shm.read(shm, 64, 64 * 9) == {:ok, binary_part(expected, 0, 64 * 9)}
    end

    test "bad cells or entities are badarg and nothing is written; too many: :bounds", %{
      shm: shm
    } do
      for bad <- [
            :cells,
            [{1, [ent(1, 0, 0, 0, 0)]} | :improper],
            [{1, [ent(1, 0, 0, 0, 0)], :three}],
            [{1, [{:entity, 1, :body, 0}]}],
            [{1, [ent(1, 0.5, 0, 0, 0)]}],
            [{1, [ent(1, 1 <<< 63, 0, 0, 0)]}],
            [{1, [ent(1, 0, 0, 0, 0) | :improper]}],
            [{1, [%{id: 1, x: 0, y: 0, vx: 0, vy: 0, kind: :body}]}],
            [{1, ["entity"]}],
            [{1, [{}]}],
            [{}],
            [%{1 => []}],
            [{1, %{}}],
            [1 <<< 70],
            [{1, [@tuple_like]}]
          ] do
        assert_raise ArgumentError, fn ->
          Shm.publish_entities(shm, 0, 1024, 0, 1, bad, @spec_)
        end
      end

      for spec <- [{1, 3, 4, 5}, {1, 3, 4, 5, 6, 512, 3, -1}, {1, 3, 4, 5, 256, 512, 3, 1}] do
        assert_raise ArgumentError, fn ->
          Shm.publish_entities(shm, 0, 1024, 0, 1, [{1, [ent(1, 0, 0, 0, 0)]}], spec)
        end
      end

      assert {:ok, <<0::64>>} = Shm.read(shm, 0, 8)
      cells = [{1, for(i <- 1..16, do: ent(i, 0, 0, 0, 0))}]
      assert Shm.publish_entities(shm, 0, 64 + 64 * 15, 0, 1, cells, @spec_) == {:error, :bounds}
      assert Shm.publish_entities(shm, 0, 64 + 64 * 16, 0, 1, cells, @spec_) == {:ok, 16}
    end
  end

  describe "consume_results/6" do
    defp publish_results(shm, region, seq, tick, results) do
      records =
        for {id, x, y} <- results,
            into: <<>>,
            do: <<id::64-little-signed, x::64-little-signed, y::64-little-signed, 0::64>>

      head =
        <<tick::64-little-signed, length(results)::64-little, 0::64-little,
          byte_size(records)::64-little>>

      Shm.publish(shm, region, seq, head, records)
    end

    test "the results, in order", %{shm: shm} do
      results = [{5, 10, -20}, {-(1 <<< 63), (1 <<< 63) - 1, 0}, {9, 1, 2}]
      assert publish_results(shm, 8192, 0, 300, results) == :ok
      assert Shm.consume_results(shm, 8192, 1024, 2, 300, 3) == {:ok, results}
      assert publish_results(shm, 8192, 2, 301, []) == :ok
      assert Shm.consume_results(shm, 8192, 1024, 4, 301, 0) == {:ok, []}
    end

    test "a copy of another tick or count, seq or a torn region fails", %{shm: shm} do
      assert publish_results(shm, 8192, 0, 300, [{1, 2, 3}, {4, 5, 6}]) == :ok
      assert Shm.consume_results(shm, 8192, 1024, 2, 299, 2) == {:error, {:tick, 300}}
      assert Shm.consume_results(shm, 8192, 1024, 2, 300, 1) == {:error, {:count, 2}}
      assert Shm.consume_results(shm, 8192, 1024, 2, 300, 3) == {:error, {:count, 2}}
      assert Shm.consume_results(shm, 8192, 1024, 4, 300, 2) == {:error, :seq}
      assert Shm.write(shm, 8192, <<3::64-little>>) == :ok
      assert Shm.consume_results(shm, 8192, 1024, 2, 300, 2) == {:error, :torn}
    end

    test "/7: the results' ids must be those of the request region's bodies", %{shm: shm} do
      bodies = [{5, 0, 0, 0, 0, 1, 1}, {9, 0, 0, 0, 0, 1, 1}]
      assert Shm.publish_bodies(shm, 0, 1024, 0, 1, bodies) == {:ok, 2}
      assert publish_results(shm, 8192, 0, 300, [{5, 1, 2}, {9, 3, 4}]) == :ok
      assert Shm.consume_results(shm, 8192, 1024, 2, 300, 2, 0) == {:ok, [{5, 1, 2}, {9, 3, 4}]}
      assert publish_results(shm, 8192, 2, 300, [{9, 1, 2}, {5, 3, 4}]) == :ok
      assert Shm.consume_results(shm, 8192, 1024, 4, 300, 2, 0) == {:error, :ids}
      assert Shm.consume_results(shm, 8192, 1024, 4, 301, 2, 0) == {:error, {:tick, 300}}
      assert Shm.consume_results(shm, 8192, 1024, 4, 300, 2, @size - 64) == {:error, :bounds}
      assert Shm.consume_results(shm, 8192, 1024, 4, 300, 2, 100) == {:error, :bounds}
    end

    test "arguments", %{shm: shm} do
      assert Shm.consume_results(shm, 8192, 64 + 32 * 3 - 1, 0, 0, 3) == {:error, :bounds}
      assert Shm.consume_results(shm, 8192, 63, 0, 0, 0) == {:error, :bounds}
      assert Shm.consume_results(shm, 8200, 1024, 0, 0, 0) == {:error, :bounds}
      assert Shm.consume_results(shm, @size - 64, 128, 0, 0, 0) == {:error, :bounds}
      assert Shm.consume_results(shm, 0, 1024, 0, 0, 1 <<< 64) == {:error, :bounds}
      assert Shm.consume_results(shm, 0, 1024, 0, 0, -1) == {:error, :bounds}
      assert_raise ArgumentError, fn -> Shm.consume_results(shm, 0, 1024, 0, 0, :n) end
      assert_raise ArgumentError, fn -> Shm.consume_results(shm, 0, 1024, 0, 1 <<< 63, 0) end
      assert_raise ArgumentError, fn -> Shm.consume_results(shm, 0, 1024, -1, 0, 0) end
    end
  end

  describe "consume_moved/8" do
    @at {1, 3, 4}

    test "the entities moved to their results, in order", %{
      shm: shm
    } do
      a = {:e, 5, :a, 0, 0}
      b = {:e, 9, :b, 7, 8}
      c = {:e, 2, :c, 1, 1, :extra}
      assert publish_results(shm, 8192, 0, 300, [{5, 10, -20}, {9, 7, 8}, {2, 3, 4}]) == :ok

      assert {:ok, [a2, b2, c2]} =
               Shm.consume_moved(shm, 8192, 1024, 2, 300, 3, cells(a, b, c), @at)

      assert a2 == {:e, 5, :a, 10, -20}
      assert c2 == {:e, 2, :c, 3, 4, :extra}
      assert b2 == b
      assert publish_results(shm, 8192, 2, 301, []) == :ok
      assert Shm.consume_moved(shm, 8192, 1024, 4, 301, 0, [{1, []}], @at) == {:ok, []}
    end

    test "the entities must be the results' bodies, in order", %{shm: shm} do
      [a, b, c] = for id <- [5, 9, 2], do: {:e, id, :x, 0, 0}
      assert publish_results(shm, 8192, 0, 300, [{5, 1, 1}, {9, 1, 1}, {2, 1, 1}]) == :ok
      moved = &Shm.consume_moved(shm, 8192, 1024, 2, 300, 3, &1, @at)
      assert moved.([{1, [a, c]}, {2, [b]}]) == {:error, :ids}
      assert moved.([{1, [a, b]}]) == {:error, :ids}
      assert moved.([{1, [a, b, c, c]}]) == {:error, :ids}
      assert {:ok, _} = moved.([{1, [a]}, {2, []}, {3, [b, c]}])
      # The checks of consume_results/6 come first.
      assert Shm.consume_moved(shm, 8192, 1024, 2, 299, 3, [], @at) == {:error, {:tick, 300}}
      assert Shm.consume_moved(shm, 8192, 1024, 4, 300, 3, [], @at) == {:error, :seq}
      assert Shm.consume_moved(shm, 8192, 64 + 32 * 2, 2, 300, 3, [], @at) == {:error, :bounds}
    end

    test "cells, entities and positions that are not what they must be: badarg", %{shm: shm} do
      assert publish_results(shm, 8192, 0, 300, [{5, 1, 1}]) == :ok
      moved = &Shm.consume_moved(shm, 8192, 1024, 2, 300, 1, &1, &2)

      for {cells, at} <- [
            {[{1, [{:e, 5, :x, 0}]}], @at},
            {[{1, [{:e, :five, :x, 0, 0}]}], @at},
            {[{1, [[:e, 5, :x, 0, 0]]}], @at},
            {[{1, [{:e, 5, :x, 0, 0}], :more}], @at},
            {[{1, [{:e, 5, :x, 0, 0}]} | :tail], @at},
            {[{1, [{:e, 5, :x, 0, 0} | :tail]}], @at},
            {[{1, [List.to_tuple([:e, 5 | List.duplicate(0, 255)])]}], @at},
            {[{1, [{:e, 5, :x, 0, 0}]}], {1, 3}},
            {[{1, [{:e, 5, :x, 0, 0}]}], {1, 3, 256}},
            {[{1, [{:e, 5, :x, 0, 0}]}], {1, 3, -1}},
            {[{1, [%{0 => :e, 1 => 5, 2 => :x, 3 => 0, 4 => 0}]}], @at},
            {[{1, [<<5>>]}], @at},
            {[{1, [{}]}], @at},
            {[{}], @at},
            {[{1, 5 <<< 70}], @at},
            {[{1, [@tuple_like]}], @at}
          ] do
        assert_raise ArgumentError, fn -> moved.(cells, at) end
      end

      # The moved entity is a new term: the one given is as it was.
      e = {:e, 5, :x, Enum.random([0]), 0}
      assert {:ok, [{:e, 5, :x, 1, 1}]} = moved.([{1, [e]}], @at)
      assert e == {:e, 5, :x, 0, 0}
    end

    defp cells(a, b, c), do: [{1, [a]}, {2, []}, {3, [b, c]}]

    # The NIF reads and makes the runtime's immediate integers (60 bits) itself, and leaves
    # the others to the NIF API: values on both sides of each edge, in and out.
    test "integers at the edges of the runtime's small integers, both ways", %{shm: shm} do
      edges = for e <- [1 <<< 59, -(1 <<< 59)], d <- [-2, -1, 0, 1], do: e + d
      values = edges ++ [0, -1, (1 <<< 63) - 1, -(1 <<< 63)]
      # (y = -v - 1: also an i64, and on the other side of each edge.)
      entities = for {v, i} <- Enum.with_index(values, 1), do: {:e, i, :x, v, -v - 1}
      cells = [{1, entities}]

      assert Shm.publish_entities(shm, 0, 4096, 0, 7, cells, {1, 3, 4, 3, 4, 0, 0, 1 <<< 62}) ==
               {:ok, length(values)}

      {:ok, records} = Shm.read(shm, 64, 64 * length(values))

      read =
        for <<id::64-little-signed, x::64-little-signed, y::64-little-signed,
              _::binary-40 <-
                records>>,
            do: {id, x, y}

      expected = for {:e, id, :x, x, y} <- entities, do: {id, x, y}

      assert read == expected

      flipped = for {id, x, y} <- expected, do: {id, y, x}
      assert publish_results(shm, 8192, 0, 300, flipped) == :ok
      assert Shm.consume_results(shm, 8192, 4096, 2, 300, length(values)) == {:ok, flipped}

      assert {:ok, out} = Shm.consume_moved(shm, 8192, 4096, 2, 300, length(values), cells, @at)

      assert for({:e, id, :x, x, y} <- out, do: {id, x, y}) == flipped
    end
  end

  describe "path queries and their answers (publish_*/8 and /7, consume_*/9 and /8)" do
    @query <<7::64-little, 1::64-little, 2::64-little, 3::64-little, 4::64-little, 0::192>>

    test "queries after the body records; their answers after the results", %{shm: shm} do
      cells = [{1, [ent(5, 10, 20, 0, 0)]}]
      queries = @query <> @query
      assert Shm.publish_entities(shm, 0, 1024, 0, 9, cells, @spec_, queries) == {:ok, 1}

      assert {:ok, <<2::64-little, 9::64-little, 1::64-little, 2::64-little, 192::64-little>>} =
               Shm.read(shm, 0, 40)

      assert Shm.read(shm, 128, 128) == {:ok, queries}

      assert Shm.publish_bodies(shm, 2048, 1024, 0, 9, [{5, 10, 20, 0, 0, 512, 3}], queries) ==
               {:ok, 1}

      assert Shm.read(shm, 0, 256) |> elem(1) |> binary_part(8, 248) ==
               Shm.read(shm, 2048, 256) |> elem(1) |> binary_part(8, 248)

      # An answer: one result, then two path answers (7 found, 2 points; 7 blocked, none).
      paths =
        <<7::64-little, 0::64-little, 2::64-little, 1::64-little, 2::64-little, 3::64-little,
          4::64-little, 7::64-little, 1::64-little, 0::64-little>>

      records = <<5::64-little, 11::64-little, 21::64-little, 0::64>> <> paths
      head = <<9::64-little, 1::64-little, 2::64-little, byte_size(records)::64-little>>
      assert Shm.publish(shm, 8192, 0, head, records) == :ok

      assert Shm.consume_moved(shm, 8192, 1024, 2, 9, 1, cells, @at, 2) ==
               {:ok, [ent(5, 11, 21, 0, 0)], paths}

      assert Shm.consume_results(shm, 8192, 1024, 2, 9, 1, 0, 2) == {:ok, [{5, 11, 21}], paths}

      # The header's q and bytes are checked, whichever arity.
      assert Shm.consume_moved(shm, 8192, 1024, 2, 9, 1, cells, @at, 1) ==
               {:error, {:queries, 2}}

      assert Shm.consume_moved(shm, 8192, 1024, 2, 9, 1, cells, @at) == {:error, {:queries, 2}}
      assert Shm.consume_results(shm, 8192, 1024, 2, 9, 1) == {:error, {:queries, 2}}
      # Bytes beyond the region, or fewer than the results': refused before the copy.
      assert Shm.consume_results(shm, 8192, 64 + 64, 2, 9, 1, 0, 2) == {:error, {:bytes, 112}}
      head = <<9::64-little, 2::64-little, 2::64-little, 40::64-little>>
      assert Shm.publish(shm, 8192, 2, head, binary_part(records, 0, 40)) == :ok
      assert Shm.consume_results(shm, 8192, 1024, 4, 9, 2, 0, 2) == {:error, {:bytes, 40}}
    end

    test "queries that are not whole records: badarg; too many: :bounds", %{shm: shm} do
      cells = [{1, [ent(5, 10, 20, 0, 0)]}]

      for bad <- [:queries, "short", @query <> "x"] do
        assert_raise ArgumentError, fn ->
          Shm.publish_entities(shm, 0, 1024, 0, 9, cells, @spec_, bad)
        end

        assert_raise ArgumentError, fn ->
          Shm.publish_bodies(shm, 0, 1024, 0, 9, [], bad)
        end
      end

      assert Shm.publish_entities(shm, 0, 64 + 64 * 2, 0, 9, cells, @spec_, @query) == {:ok, 1}
      # Room for two records: a body and two queries, or three queries, do not fit.
      two = @query <> @query

      assert Shm.publish_entities(shm, 0, 64 + 64 * 2, 2, 9, cells, @spec_, two) ==
               {:error, :bounds}

      assert Shm.publish_bodies(shm, 0, 64 + 64 * 2, 2, 9, [], two <> @query) ==
               {:error, :bounds}
    end
  end

  describe "a file resized by the other process" do
    test "truncated: every call answers {:error, :resized}", %{path: path, shm: shm} do
      assert Shm.publish(shm, 64, 0, "", "x") == :ok
      truncate!(path, 0)
      assert Shm.size(shm) == {:ok, @size, 0}
      assert Shm.read(shm, 0, 8) == {:error, :resized}
      assert Shm.write(shm, 0, "x") == {:error, :resized}
      assert Shm.publish(shm, 64, 2, "", "x") == {:error, :resized}

      assert Shm.publish_bodies(shm, 64, 1024, 2, 1, [{1, 2, 3, 4, 5, 6, 7}]) ==
               {:error, :resized}

      assert Shm.consume(shm, 64, 2, 64) == {:error, :resized}
      assert Shm.consume_results(shm, 64, 1024, 2, 1, 0) == {:error, :resized}
      assert Shm.close(shm) == :ok
    end

    test "truncated to half, as the sidecar's shrink fault does", %{path: path, shm: shm} do
      truncate!(path, div(@size, 2))
      assert Shm.read(shm, 0, 8) == {:error, :resized}
      assert Shm.consume(shm, div(@size, 2), 0, 64) == {:error, :resized}
    end

    test "grown: {:error, :resized} too", %{path: path, shm: shm} do
      truncate!(path, 2 * @size)
      assert Shm.size(shm) == {:ok, @size, 2 * @size}
      assert Shm.read(shm, 0, 8) == {:error, :resized}
      assert Shm.publish(shm, 64, 0, "", "") == {:error, :resized}
      assert Shm.consume(shm, 64, 0, 64) == {:error, :resized}
    end

    test "a copy that faults past the file's new end (SIGBUS) is caught: {:error, :resized}", %{
      path: path,
      shm: shm
    } do
      # __read_unchecked__/3 skips the size check: the copy touches pages the truncation
      # removed, and the SIGBUS handler ends it. Twice: the handler is armed again after one.
      assert Shm.write(shm, 0, "head") == :ok
      truncate!(path, 4096)
      assert Shm.__read_unchecked__(shm, 0, 4) == {:ok, "head"}
      assert Shm.__read_unchecked__(shm, 4096, 64) == {:error, :resized}
      assert Shm.__read_unchecked__(shm, 0, @size) == {:error, :resized}
      assert Shm.__read_unchecked__(shm, @size - 8, 8) == {:error, :resized}
      assert Shm.__read_unchecked__(shm, 0, 4) == {:ok, "head"}
      assert Shm.read(shm, 0, 4) == {:error, :resized}
    end

    test "truncated and restored over and over while other processes copy", %{
      path: path,
      shm: shm
    } do
      # The race the SIGBUS handler is for: the size checked, then the file truncated during
      # the copy. A copy is whole, or :resized (:fault when the file got its size back between
      # the fault and the check that follows it).
      {:ok, file} = :file.open(path, [:read, :write, :raw, :binary])
      parent = self()

      copiers =
        for i <- 1..2 do
          spawn_link(fn ->
            results =
              Enum.frequencies_by(1..3000, fn _ ->
                result =
                  case i do
                    1 -> Shm.read(shm, 0, @size)
                    2 -> Shm.write(shm, 0, :binary.copy(<<1>>, @size))
                  end

                case result do
                  {:error, reason} -> reason
                  _ -> :ok
                end
              end)

            send(parent, {:done, self(), results})
          end)
        end

      for _ <- 1..500 do
        {:ok, 0} = :file.position(file, 0)
        :ok = :file.truncate(file)
        {:ok, @size} = :file.position(file, @size)
        :ok = :file.truncate(file)
      end

      for pid <- copiers do
        assert_receive {:done, ^pid, results}, 30_000
        assert Map.keys(results) -- [:ok, :resized, :fault] == []
      end

      :ok = :file.close(file)
      assert Shm.size(shm) == {:ok, @size, @size}
      assert {:ok, _} = Shm.read(shm, 0, 8)
    end

    test "from several processes at once, the node alive", %{path: path, shm: shm} do
      truncate!(path, 0)

      1..8
      |> Enum.map(fn _ ->
        Task.async(fn ->
          for _ <- 1..200, uniq: true, do: Shm.__read_unchecked__(shm, 0, @size)
        end)
      end)
      |> Enum.each(&assert(Task.await(&1) == [{:error, :resized}]))
    end
  end

  test "a SIGBUS not from a guarded copy keeps its default action (the OS process dies)" do
    # In a node of its own: the library loaded (its handler installed), then a SIGBUS sent
    # with kill(2) must not be swallowed.
    ebin = Path.join(Mix.Project.app_path(), "ebin")

    script = """
    :ok = Overworld.Sidecar.Shm.load()
    IO.puts("loaded")
    System.cmd("kill", ["-BUS", System.pid()])
    Process.sleep(5_000)
    IO.puts("survived")
    """

    {output, status} = System.cmd("elixir", ["-pa", ebin, "-e", script], stderr_to_stdout: true)
    assert output =~ "loaded"
    refute output =~ "survived"
    # 128 + SIGBUS (7), as the shell reports a process killed by the signal.
    assert status == 135
  end

  if System.get_env("OW_SHM_BENCH") do
    @tag timeout: 300_000
    test "bench: publish_bodies/6 of 5,000 and 10,000 bodies, consume_results/6 of 10,000", %{
      path: path,
      shm: shm
    } do
      # Two regions: bodies for 10,000 at 0, results for 10,000 after it.
      region_len = 64 + 64 * 10_000
      :ok = Shm.close(shm)
      {:ok, shm} = Shm.create(path, 2 * region_len)

      for n <- [5_000, 10_000] do
        bodies = for i <- 1..n, do: {i, i * 1000, -i * 1000, 3, -4, 500, 70_000}
        {:ok, <<base::64-little>>} = Shm.read(shm, 0, 8)

        times =
          bench(fn i ->
            {:ok, ^n} = Shm.publish_bodies(shm, 0, region_len, base + 2 * i, 1, bodies)
          end)

        IO.puts("    publish_bodies #{n}: #{format(times)}")
      end

      n = 10_000

      records =
        for i <- 1..n,
            into: <<>>,
            do: <<i::64-little, i::64-little, -i::64-little-signed, 0::64>>

      head = <<1::64-little, n::64-little, 0::64-little, byte_size(records)::64-little>>
      :ok = Shm.publish(shm, region_len, 0, head, records)

      times =
        bench(fn _ ->
          {:ok, [_ | _]} = Shm.consume_results(shm, region_len, region_len, 2, 1, n)
        end)

      IO.puts("    consume_results #{n}: #{format(times)}")
    end

    # 300 calls (fun.(0), fun.(1), ...), the first 20 dropped: their times in µs, sorted.
    defp bench(fun) do
      for i <- 0..299 do
        {us, _} = :timer.tc(fn -> fun.(i) end)
        us
      end
      |> Enum.drop(20)
      |> Enum.sort()
    end

    defp format(sorted) do
      n = length(sorted)

      "median #{Enum.at(sorted, div(n, 2))} µs, p90 #{Enum.at(sorted, div(n * 9, 10))} µs, " <>
        "min #{hd(sorted)} µs"
    end
  end
end
