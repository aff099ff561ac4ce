defmodule Overworld.Storage.Object do
  @moduledoc """
  A stored object and the rules every storage adapter applies to it: validation of what a
  caller sends, versions, read and write permissions, and the checks of a conditional write or
  delete. Pure functions: an adapter calls them inside its own transaction, so that both
  adapters answer alike (the contract tests check it).

  An object is a map:

    * `:collection`, `:key` — 1 to 128 bytes of UTF-8 each, without control characters;
    * `:user_id` — the owner (a user id), or `""` for the system's objects (written by server
      code only);
    * `:value` — the object's JSON text (a JSON object), as stored;
    * `:version` — 32 lowercase hex characters, a hash of the value: a write conditioned on it
      succeeds only while the object still has that value;
    * `:read` — 0: no client reads it (server code only), 1: its owner, 2: anyone;
    * `:write` — 0: no client writes or deletes it, 1: its owner;
    * `:created_at`, `:updated_at` — unix milliseconds.
  """

  @typedoc "Who calls: server code (no permission applies) or a client's user."
  @type caller :: :server | {:user, binary}

  @type t :: %{
          collection: binary,
          key: binary,
          user_id: binary,
          value: binary,
          version: binary,
          read: 0..2,
          write: 0..1,
          created_at: integer,
          updated_at: integer
        }

  @typedoc """
  A write, validated: `version` is nil (write whatever is there), `"*"` (only if there is no
  such object) or a version (only if the object has it).
  """
  @type write :: %{
          collection: binary,
          key: binary,
          user_id: binary,
          value: binary,
          version: nil | binary,
          read: 0..2,
          write: 0..1
        }

  @typedoc "A delete, validated (`version` as for a write, but for `\"*\"`)."
  @type delete :: %{collection: binary, key: binary, user_id: binary, version: nil | binary}

  @max_name 128

  @doc """
  The version of a value: the first 16 bytes of its SHA-256, in hex.

      iex> Overworld.Storage.Object.version(~s({"a":1}))
      "015abd7f5cc57a2dd94b7590f04ad808"
  """
  @spec version(binary) :: binary
  def version(value),
    do: :crypto.hash(:sha256, value) |> binary_part(0, 16) |> Base.encode16(case: :lower)

  @doc """
  An object from its fields in storage order: `[collection, user_id, key, value, version,
  read, write, created_at, updated_at]` (the adapters' rows).
  """
  @spec from_row([term]) :: t
  def from_row([c, u, k, value, version, read, write, created_at, updated_at]) do
    %{
      collection: c,
      key: k,
      user_id: u,
      value: value,
      version: version,
      read: read,
      write: write,
      created_at: created_at,
      updated_at: updated_at
    }
  end

  @doc """
  Whether `caller` may read `object`.

      iex> alias Overworld.Storage.Object
      iex> Object.readable?(%{user_id: "u1", read: 1}, {:user, "u1"})
      true
      iex> Object.readable?(%{user_id: "u1", read: 1}, {:user, "u2"})
      false
      iex> Object.readable?(%{user_id: "u1", read: 2}, {:user, "u2"})
      true
      iex> Object.readable?(%{user_id: "u1", read: 0}, {:user, "u1"})
      false
      iex> Object.readable?(%{user_id: "u1", read: 0}, :server)
      true
  """
  @spec readable?(%{user_id: binary, read: 0..2}, caller) :: boolean
  def readable?(_object, :server), do: true
  def readable?(%{read: 2}, _caller), do: true
  def readable?(%{user_id: u, read: 1}, {:user, u}), do: true
  def readable?(_object, _caller), do: false

  @doc """
  The object a write makes of `existing` (nil: none) at time `now` (unix ms), or why not:
  `:permission_denied` (a client writing an object whose `write` is 0), `:version_conflict`
  (the condition does not hold).

      iex> alias Overworld.Storage.Object
      iex> w = %{collection: "c", key: "k", user_id: "u", value: "{}", version: "*", read: 1, write: 1}
      iex> {:ok, o} = Object.apply_write(nil, w, {:user, "u"}, 5)
      iex> {o.version, o.created_at, o.updated_at}
      {"44136fa355b3678a1146ad16f7e8649e", 5, 5}
      iex> Object.apply_write(o, w, {:user, "u"}, 6)
      {:error, :version_conflict}
      iex> {:ok, o2} = Object.apply_write(o, %{w | version: o.version, value: "[]"}, {:user, "u"}, 7)
      iex> {o2.created_at, o2.updated_at}
      {5, 7}
      iex> Object.apply_write(%{o | write: 0}, %{w | version: nil}, {:user, "u"}, 8)
      {:error, :permission_denied}
      iex> {:ok, _} = Object.apply_write(%{o | write: 0}, %{w | version: nil}, :server, 8)
  """
  @spec apply_write(t | nil, write, caller, integer) ::
          {:ok, t} | {:error, :permission_denied | :version_conflict}
  def apply_write(existing, w, caller, now) do
    cond do
      existing != nil and existing.write == 0 and caller != :server ->
        {:error, :permission_denied}

      not holds?(existing, w.version) ->
        {:error, :version_conflict}

      true ->
        {:ok, made(existing, w, now)}
    end
  end

  defp made(existing, w, now) do
    %{
      collection: w.collection,
      key: w.key,
      user_id: w.user_id,
      value: w.value,
      version: version(w.value),
      read: w.read,
      write: w.write,
      created_at: if(existing, do: existing.created_at, else: now),
      updated_at: now
    }
  end

  @doc """
  Whether a delete of `existing` (nil: none) goes ahead: `:delete`, `:absent` (nothing to
  delete, no condition: not an error), or why not.

      iex> alias Overworld.Storage.Object
      iex> o = %{user_id: "u", version: "v1", write: 1}
      iex> Object.check_delete(o, %{version: nil}, {:user, "u"})
      :delete
      iex> Object.check_delete(o, %{version: "v2"}, {:user, "u"})
      {:error, :version_conflict}
      iex> Object.check_delete(nil, %{version: nil}, {:user, "u"})
      :absent
      iex> Object.check_delete(nil, %{version: "v1"}, {:user, "u"})
      {:error, :version_conflict}
      iex> Object.check_delete(%{o | write: 0}, %{version: nil}, {:user, "u"})
      {:error, :permission_denied}
  """
  @spec check_delete(t | map | nil, %{version: nil | binary}, caller) ::
          :delete | :absent | {:error, :permission_denied | :version_conflict}
  def check_delete(existing, d, caller) do
    cond do
      existing == nil and d.version == nil -> :absent
      not holds?(existing, d.version) -> {:error, :version_conflict}
      existing.write == 0 and caller != :server -> {:error, :permission_denied}
      true -> :delete
    end
  end

  defp holds?(_existing, nil), do: true
  defp holds?(existing, "*"), do: existing == nil
  defp holds?(nil, _version), do: false
  defp holds?(existing, version), do: existing.version == version

  ## Validation of what callers send

  @doc """
  Validates a write from `caller` (a map with string or atom keys: `collection`, `key`,
  `value` — a JSON object, as text or as a map —, and optionally `user_id` (server code
  only: a client writes its own objects), `version`, `read` (default 1), `write` (default 1)).
  The value is stored as compact JSON text of at most `max_bytes`.

      iex> alias Overworld.Storage.Object
      iex> {:ok, w} = Object.validate_write(%{"collection" => "saves", "key" => "slot1", "value" => ~s({ "hp": 3 })}, {:user, "u"}, 1024)
      iex> {w.user_id, w.value, w.read, w.write, w.version}
      {"u", ~s({"hp":3}), 1, 1, nil}
      iex> Object.validate_write(%{collection: "saves", key: "k", value: "[1]"}, {:user, "u"}, 1024)
      {:error, "value must be a JSON object"}
      iex> Object.validate_write(%{collection: "saves", key: "k", value: %{a: 1}, read: 3}, {:user, "u"}, 1024)
      {:error, "read must be 0, 1 or 2"}
      iex> Object.validate_write(%{collection: "saves", key: "k", value: %{a: 1}, user_id: "other"}, {:user, "u"}, 1024)
      {:error, :permission_denied}
      iex> Object.validate_write(%{collection: "saves", key: "k", value: %{a: String.duplicate("x", 50)}}, :server, 32)
      {:error, {:too_large, 58, 32}}
  """
  @spec validate_write(map, caller, pos_integer) ::
          {:ok, write}
          | {:error, binary | :permission_denied | {:too_large, pos_integer, pos_integer}}
  def validate_write(w, caller, max_bytes) when is_map(w) do
    with {:ok, collection} <- name(field(w, :collection), "collection"),
         {:ok, key} <- name(field(w, :key), "key"),
         {:ok, user_id} <- owner(field(w, :user_id), caller),
         {:ok, value} <- value(field(w, :value), max_bytes),
         {:ok, version} <- condition(field(w, :version), true),
         {:ok, read} <- permission(field(w, :read), 1, [0, 1, 2], "read must be 0, 1 or 2"),
         {:ok, write} <- permission(field(w, :write), 1, [0, 1], "write must be 0 or 1") do
      {:ok,
       %{
         collection: collection,
         key: key,
         user_id: user_id,
         value: value,
         version: version,
         read: read,
         write: write
       }}
    end
  end

  def validate_write(_w, _caller, _max), do: {:error, "a write must be an object"}

  @doc """
  Validates a delete from `caller` (`collection`, `key`, optionally `version` and, for server
  code, `user_id`).

      iex> Overworld.Storage.Object.validate_delete(%{"collection" => "c", "key" => "k"}, {:user, "u"})
      {:ok, %{collection: "c", key: "k", user_id: "u", version: nil}}
      iex> Overworld.Storage.Object.validate_delete(%{"collection" => "c", "key" => "k", "version" => "*"}, {:user, "u"})
      {:error, "version must be a version string"}
  """
  @spec validate_delete(map, caller) :: {:ok, delete} | {:error, binary | :permission_denied}
  def validate_delete(d, caller) when is_map(d) do
    with {:ok, collection} <- name(field(d, :collection), "collection"),
         {:ok, key} <- name(field(d, :key), "key"),
         {:ok, user_id} <- owner(field(d, :user_id), caller),
         {:ok, version} <- condition(field(d, :version), false) do
      {:ok, %{collection: collection, key: key, user_id: user_id, version: version}}
    end
  end

  def validate_delete(_d, _caller), do: {:error, "a delete must be an object"}

  @doc """
  Validates a read's object id: `collection`, `key` and `user_id` (the owner; `""` or absent:
  the system's objects).

      iex> Overworld.Storage.Object.validate_id(%{"collection" => "c", "key" => "k", "user_id" => "u"})
      {:ok, {"c", "k", "u"}}
      iex> Overworld.Storage.Object.validate_id(%{"collection" => "", "key" => "k"})
      {:error, "collection must be 1 to 128 bytes of UTF-8 without control characters"}
  """
  @spec validate_id(map) :: {:ok, {binary, binary, binary}} | {:error, binary}
  def validate_id(r) when is_map(r) do
    with {:ok, collection} <- name(field(r, :collection), "collection"),
         {:ok, key} <- name(field(r, :key), "key"),
         {:ok, user_id} <- user_id(field(r, :user_id)) do
      {:ok, {collection, key, user_id}}
    end
  end

  def validate_id(_r), do: {:error, "an object id must be an object"}

  @doc """
  Whether `name` is a valid collection or key: 1 to 128 bytes of UTF-8 without control
  characters.

      iex> Overworld.Storage.Object.valid_name?("inventory")
      true
      iex> Overworld.Storage.Object.valid_name?("a\\nb")
      false
  """
  @spec valid_name?(term) :: boolean
  def valid_name?(name) when is_binary(name) and byte_size(name) in 1..@max_name,
    do: String.valid?(name) and not String.match?(name, ~r/[\x00-\x1f\x7f]/)

  def valid_name?(_name), do: false

  # (A field given with a string key, as decoded JSON has it, or an atom key.)
  defp field(map, key), do: Map.get(map, Atom.to_string(key), Map.get(map, key))

  defp name(value, what) do
    if valid_name?(value),
      do: {:ok, value},
      else: {:error, "#{what} must be 1 to 128 bytes of UTF-8 without control characters"}
  end

  defp user_id(nil), do: {:ok, ""}
  defp user_id(""), do: {:ok, ""}

  defp user_id(id) do
    if valid_name?(id), do: {:ok, id}, else: {:error, "user_id must be a user id"}
  end

  # A client's objects are its own; server code names the owner ("" or none: the system).
  defp owner(given, {:user, u}) when given in [nil, u], do: {:ok, u}
  defp owner(_given, {:user, _u}), do: {:error, :permission_denied}
  defp owner(given, :server), do: user_id(given)

  defp value(v, max) when is_map(v) do
    sized(encode(v), max)
  catch
    # (Server code's map holding what JSON has no form for: a tuple, a pid.)
    _, _ -> {:error, "value must be a JSON object"}
  end

  defp value(v, max) when is_binary(v) do
    # (Text longer than the limit is refused before it is parsed.)
    if byte_size(v) > 4 * max do
      {:error, {:too_large, byte_size(v), max}}
    else
      case decode(v) do
        {:ok, map} when is_map(map) -> sized(encode(map), max)
        {:ok, _} -> {:error, "value must be a JSON object"}
        :error -> {:error, "value must be JSON text"}
      end
    end
  end

  defp value(_v, _max), do: {:error, "value must be a JSON object"}

  defp encode(map), do: map |> :jiffy.encode() |> IO.iodata_to_binary()

  defp decode(text) do
    {:ok, :jiffy.decode(text, [:return_maps, :dedupe_keys])}
  catch
    _, _ -> :error
  end

  defp sized(text, max) when byte_size(text) <= max, do: {:ok, text}
  defp sized(text, max), do: {:error, {:too_large, byte_size(text), max}}

  defp condition(nil, _any?), do: {:ok, nil}
  defp condition("", _any?), do: {:ok, nil}
  defp condition("*", true), do: {:ok, "*"}

  defp condition(v, _any?) when is_binary(v) and byte_size(v) == 32 do
    if v =~ ~r/\A[0-9a-f]{32}\z/, do: {:ok, v}, else: {:error, "version must be a version string"}
  end

  defp condition(_v, _any?), do: {:error, "version must be a version string"}

  defp permission(nil, default, _allowed, _message), do: {:ok, default}

  defp permission(p, _default, allowed, message),
    do: if(p in allowed, do: {:ok, p}, else: {:error, message})
end
