defmodule Overworld.Test.Observe do
  @moduledoc false
  # An observer of a zone ticked by hand (the test wire's templates), its frames applied to a
  # client view as a client would.
  import ExUnit.Assertions

  alias Overworld.{Interest, Zone}
  alias Overworld.Protocol.Snapshot

  @doc """
  Runs `ticks` ticks of `zone`; after each, the observer's frame at `path.(n)` is applied to the
  view (its size checked against what Interest says), then `check.(n, info, view, position)`.
  Answers `{observer, view}`.
  """
  def follow(zone, obs, ticks, path, check \\ fn _n, _info, _view, _pos -> :ok end) do
    templates = Overworld.Template.Test.Wire.__templates__()

    Enum.reduce(ticks, {obs, %Snapshot.View{}}, fn n, {obs, view} ->
      {:ok, ^n} = Zone.tick_now(zone)
      pos = path.(n)
      {frame, info, obs} = Interest.frame(obs, n, pos)
      bin = IO.iodata_to_binary(frame)
      assert byte_size(bin) == info.bytes
      assert {:ok, view} = Snapshot.apply(view, bin, templates)
      check.(n, info, view, pos)
      {obs, view}
    end)
  end
end
