defmodule Overworld.Test.StorageContract do
  @moduledoc false
  # The tests every storage adapter passes (`Overworld.Storage`'s contract):
  #
  #     use Overworld.Test.StorageContract
  #
  # in a test module whose `setup` puts `store:` (the name of a started store) in the context.
  # Users, collections and keys are fresh per test: a store's data outlives a test.

  defmacro __using__(_opts) do
    quote do
      alias Overworld.Storage
      alias Overworld.Storage.Object

      defp fresh(prefix), do: prefix <> Base.encode16(:crypto.strong_rand_bytes(6), case: :lower)

      defp w(collection, key, value, more \\ []),
        do: Map.merge(%{collection: collection, key: key, value: value}, Map.new(more))

      defp id(collection, key, user), do: %{collection: collection, key: key, user_id: user}

      test "a write reads back: compact JSON, its version, permissions, times", %{store: s} do
        {u, c} = {fresh("u"), fresh("c")}
        before = System.system_time(:millisecond)

        assert {:ok, [ack]} =
                 Storage.write(s, {:user, u}, [w(c, "k", ~s({ "hp" : 3, "x": [1, 2] }))])

        assert Map.delete(ack, :version) == %{collection: c, key: "k", user_id: u}

        assert {:ok, [o]} = Storage.read(s, {:user, u}, [id(c, "k", u)])
        # Stored compact (its keys in any order), the version a hash of what is stored.
        assert :jiffy.decode(o.value, [:return_maps]) == %{"hp" => 3, "x" => [1, 2]}
        refute o.value =~ " "
        assert ack.version == Object.version(o.value)
        assert {o.version, o.read, o.write, o.user_id} == {ack.version, 1, 1, u}
        assert o.created_at >= before and o.updated_at == o.created_at

        # An update keeps the creation time.
        Process.sleep(2)
        assert {:ok, [ack2]} = Storage.write(s, {:user, u}, [w(c, "k", %{hp: 4})])
        assert {:ok, [o2]} = Storage.read(s, :server, [id(c, "k", u)])
        assert o2.created_at == o.created_at and o2.updated_at > o.updated_at
        assert {o2.value, o2.version} == {~s({"hp":4}), ack2.version}
        assert ack2.version != ack.version
      end

      test "conditional writes: only if absent, only if the version holds; a batch is all or none",
           %{store: s} do
        {u, c} = {fresh("u"), fresh("c")}
        me = {:user, u}

        assert {:ok, [%{version: v1}]} = Storage.write(s, me, [w(c, "a", %{n: 1}, version: "*")])

        assert Storage.write(s, me, [w(c, "a", %{n: 2}, version: "*")]) ==
                 {:error, {:version_conflict, 0}}

        assert {:ok, [%{version: v2}]} = Storage.write(s, me, [w(c, "a", %{n: 2}, version: v1)])

        assert Storage.write(s, me, [w(c, "a", %{n: 3}, version: v1)]) ==
                 {:error, {:version_conflict, 0}}

        # The second item fails: the first is not written either.
        assert Storage.write(s, me, [w(c, "b", %{n: 1}), w(c, "a", %{n: 9}, version: v1)]) ==
                 {:error, {:version_conflict, 1}}

        assert {:ok, [a]} = Storage.read(s, me, [id(c, "a", u), id(c, "b", u)])
        assert {a.key, a.version, a.value} == {"a", v2, ~s({"n":2})}
      end

      test "of many writers of one key only if absent, exactly one wins", %{store: s} do
        {u, c} = {fresh("u"), fresh("c")}

        results =
          1..40
          |> Task.async_stream(
            fn i -> Storage.write(s, {:user, u}, [w(c, "once", %{by: i}, version: "*")]) end,
            max_concurrency: 40
          )
          |> Enum.map(fn {:ok, r} -> r end)

        assert Enum.count(results, &match?({:ok, _}, &1)) == 1
        assert Enum.count(results, &(&1 == {:error, {:version_conflict, 0}})) == 39
      end

      test "read permissions: 0 server only, 1 the owner, 2 anyone", %{store: s} do
        {a, b, c} = {fresh("u"), fresh("u"), fresh("c")}

        assert {:ok, _} =
                 Storage.write(s, {:user, a}, [
                   w(c, "none", %{}, read: 0),
                   w(c, "own", %{}, read: 1),
                   w(c, "all", %{}, read: 2)
                 ])

        ids = for k <- ["none", "own", "all"], do: id(c, k, a)

        keys = fn who ->
          {:ok, os} = Storage.read(s, who, ids)
          os |> Enum.map(& &1.key) |> Enum.sort()
        end

        assert keys.({:user, a}) == ["all", "own"]
        assert keys.({:user, b}) == ["all"]
        assert keys.(:server) == ["all", "none", "own"]
      end

      test "write permission 0: the owner cannot change or delete it, server code can", %{
        store: s
      } do
        {u, c} = {fresh("u"), fresh("c")}
        me = {:user, u}

        assert {:ok, _} =
                 Storage.write(s, :server, [w(c, "locked", %{v: 1}, user_id: u, write: 0)])

        assert Storage.write(s, me, [w(c, "locked", %{v: 2})]) ==
                 {:error, {:permission_denied, 0}}

        assert Storage.delete(s, me, [%{collection: c, key: "locked"}]) ==
                 {:error, {:permission_denied, 0}}

        assert {:ok, [%{value: ~s({"v":1})}]} = Storage.read(s, me, [id(c, "locked", u)])

        assert {:ok, _} =
                 Storage.write(s, :server, [w(c, "locked", %{v: 3}, user_id: u, write: 0)])

        assert :ok = Storage.delete(s, :server, [%{collection: c, key: "locked", user_id: u}])
        assert {:ok, []} = Storage.read(s, me, [id(c, "locked", u)])
      end

      test "a client writes only its own objects; the system's are server code's", %{store: s} do
        {a, b, c} = {fresh("u"), fresh("u"), fresh("c")}

        assert Storage.write(s, {:user, a}, [w(c, "k", %{}, user_id: b)]) ==
                 {:error, {:permission_denied, 0}}

        assert Storage.delete(s, {:user, a}, [%{collection: c, key: "k", user_id: b}]) ==
                 {:error, {:permission_denied, 0}}

        assert {:ok, [%{user_id: ""}]} =
                 Storage.write(s, :server, [w(c, "motd", %{text: "hi"}, read: 2, write: 0)])

        assert {:ok, [%{value: ~s({"text":"hi"})}]} =
                 Storage.read(s, {:user, a}, [%{collection: c, key: "motd"}])
      end

      test "deletes: unconditional, on a version; an absent object is no error but for a version",
           %{store: s} do
        {u, c} = {fresh("u"), fresh("c")}
        me = {:user, u}
        {:ok, [%{version: v}]} = Storage.write(s, me, [w(c, "a", %{})])
        {:ok, _} = Storage.write(s, me, [w(c, "b", %{})])

        assert Storage.delete(s, me, [
                 %{collection: c, key: "a", version: String.duplicate("0", 32)}
               ]) ==
                 {:error, {:version_conflict, 0}}

        # All or none: the second fails, "b" stays.
        assert Storage.delete(s, me, [
                 %{collection: c, key: "b"},
                 %{collection: c, key: "zz", version: v}
               ]) ==
                 {:error, {:version_conflict, 1}}

        assert :ok =
                 Storage.delete(s, me, [
                   %{collection: c, key: "a", version: v},
                   %{collection: c, key: "never"}
                 ])

        assert {:ok, [%{key: "b"}]} = Storage.read(s, me, [id(c, "a", u), id(c, "b", u)])
      end

      test "listing: one owner's objects in pages with a cursor, in key order", %{store: s} do
        {u, other, c} = {fresh("u"), fresh("u"), fresh("c")}
        keys = for i <- 1..25, do: "k" <> String.pad_leading("#{i}", 3, "0")
        {:ok, _} = Storage.write(s, {:user, u}, Enum.map(Enum.shuffle(keys), &w(c, &1, %{k: &1})))
        {:ok, _} = Storage.write(s, {:user, other}, [w(c, "theirs", %{}, read: 2)])

        assert {:ok, p1, c1} = Storage.list(s, {:user, u}, c, user_id: u, limit: 10)
        assert {:ok, p2, c2} = Storage.list(s, {:user, u}, c, user_id: u, limit: 10, cursor: c1)
        assert {:ok, p3, nil} = Storage.list(s, {:user, u}, c, user_id: u, limit: 10, cursor: c2)
        assert is_binary(c1) and is_binary(c2)
        assert Enum.map(p1 ++ p2 ++ p3, & &1.key) == keys
        assert Enum.all?(p1 ++ p2 ++ p3, &(&1.user_id == u))

        # A page that ends the listing exactly has no cursor.
        assert {:ok, all, nil} = Storage.list(s, {:user, u}, c, user_id: u, limit: 25)
        assert length(all) == 25
      end

      test "listing everyone's: what the caller may read, by owner then key", %{store: s} do
        c = fresh("c")
        [a, b] = Enum.sort([fresh("u"), fresh("u")])

        {:ok, _} =
          Storage.write(s, {:user, a}, [w(c, "pub", %{}, read: 2), w(c, "mine", %{}, read: 1)])

        {:ok, _} =
          Storage.write(s, {:user, b}, [w(c, "pub", %{}, read: 2), w(c, "secret", %{}, read: 1)])

        ids = fn who ->
          {:ok, os, nil} = Storage.list(s, who, c)
          Enum.map(os, &{&1.user_id, &1.key})
        end

        assert ids.({:user, a}) == [{a, "mine"}, {a, "pub"}, {b, "pub"}]
        assert ids.({:user, b}) == [{a, "pub"}, {b, "pub"}, {b, "secret"}]
        assert ids.(:server) == [{a, "mine"}, {a, "pub"}, {b, "pub"}, {b, "secret"}]
        # Another user's objects: only the public ones.
        assert {:ok, [%{key: "pub"}], nil} = Storage.list(s, {:user, b}, c, user_id: a)
        # A collection with nothing in it.
        assert {:ok, [], nil} = Storage.list(s, {:user, a}, fresh("empty"))
      end

      test "bad input: a clear error naming the item, nothing written", %{store: s} do
        {u, c} = {fresh("u"), fresh("c")}
        me = {:user, u}

        assert {:error, {:invalid, 1, "collection must be" <> _}} =
                 Storage.write(s, me, [w(c, "ok", %{}), w("", "k", %{})])

        assert {:error, {:invalid, 0, "value must be a JSON object"}} =
                 Storage.write(s, me, [w(c, "k", "[1,2]")])

        assert {:error, {:invalid, 0, "value must be JSON text"}} =
                 Storage.write(s, me, [w(c, "k", "{nope")])

        assert {:error, {:invalid, 0, "read must be 0, 1 or 2"}} =
                 Storage.write(s, me, [w(c, "k", %{}, read: "2")])

        assert {:error, {:invalid, 0, "version must be" <> _}} =
                 Storage.write(s, me, [w(c, "k", %{}, version: "x")])

        big = %{blob: String.duplicate("x", 70_000)}
        assert {:error, {:too_large, 0, _, 65_536}} = Storage.write(s, me, [w(c, "k", big)])

        assert {:error, {:batch_too_large, 101, 100}} =
                 Storage.write(s, me, for(i <- 1..101, do: w(c, "k#{i}", %{})))

        assert {:error, {:invalid, 0, _}} = Storage.write(s, me, [:not_a_map])
        assert {:error, {:invalid, 0, _}} = Storage.read(s, me, [%{collection: c}])
        assert {:error, {:bad_cursor, "x.y.z"}} = Storage.list(s, me, c, cursor: "x.y.z")
        assert {:error, {:invalid, 0, _}} = Storage.list(s, me, c, limit: 0)
        assert {:ok, [], nil} = Storage.list(s, :server, c)
      end
    end
  end
end
