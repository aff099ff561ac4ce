defmodule Overworld.Zone.Subscribers do
  @moduledoc false
  # The processes told of every finished tick (`Overworld.Zone.subscribe/2`), as functions over
  # the zone server's state (`Overworld.Zone.State`): monitored, split in one share per bucket
  # worker (each worker sends the notices of its share: no single process sends them all), and
  # remembered in the memory table, so a restarted server keeps telling them.

  alias Overworld.Zone.{Memory, State}

  @doc "Adds a subscriber (once; a dead one is forgotten)."
  @spec add(State.t(), pid) :: State.t()
  def add(st, pid) do
    cond do
      is_map_key(st.subscribers, pid) ->
        st

      not Overworld.Cluster.alive?(pid) ->
        Memory.delete_subscriber(st.memory, pid)
        st

      true ->
        Process.monitor(pid)
        shard = :erlang.phash2(pid, tuple_size(st.shards))
        shards = put_elem(st.shards, shard, [pid | elem(st.shards, shard)])
        Memory.put_subscriber(st.memory, pid, shard)
        %{st | subscribers: Map.put(st.subscribers, pid, shard), shards: shards}
    end
  end

  @doc "Removes a subscriber (unknown ones are ignored)."
  @spec remove(State.t(), pid) :: State.t()
  def remove(st, pid) do
    case Map.pop(st.subscribers, pid) do
      {nil, _} ->
        st

      {shard, subscribers} ->
        Memory.delete_subscriber(st.memory, pid)
        shards = put_elem(st.shards, shard, List.delete(elem(st.shards, shard), pid))
        %{st | subscribers: subscribers, shards: shards}
    end
  end

  @doc "A restarted server's subscribers: those its predecessor had (from the memory table)."
  @spec restore(State.t()) :: State.t()
  def restore(st), do: Enum.reduce(Memory.subscribers(st.memory), st, &add(&2, elem(&1, 0)))

  @doc "Whether `pid` is a subscriber."
  @spec member?(State.t(), pid) :: boolean
  def member?(st, pid), do: is_map_key(st.subscribers, pid)
end
