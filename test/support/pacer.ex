defmodule Overworld.Test.Pacer do
  @moduledoc false
  # Entities pacing across a vertical line at x = `line` metres: each walks a triangle wave of
  # `amplitude` metres either side of it (a period of 40 ticks), at its own height. The
  # hysteresis test puts the line on a zone border.
  require Overworld.Entity
  import Overworld.Entity, only: [entity: 2]
  use Overworld.Zone

  @impl true
  def init(args) do
    line = Keyword.fetch!(args, :line) * 1024
    amp = round(Keyword.fetch!(args, :amplitude) * 1024)

    pacers =
      for i <- 1..Keyword.fetch!(args, :n),
          do: [kind: :pacer, x: line, y: i * 5 * 1024, data: {line, amp}]

    {:ok, %{}, [{:spawn, pacers}]}
  end

  @impl true
  def handle_entity(e, _view, ctx) do
    # From the line out to +amplitude, back to -amplitude and to the line again.
    {line, amp} = entity(e, :data)
    phase = rem(ctx.tick, 40)

    off =
      cond do
        phase < 10 -> div(amp * phase, 10)
        phase < 30 -> div(amp * (20 - phase), 10)
        true -> div(amp * (phase - 40), 10)
      end

    {:ok, entity(e, x: line + off)}
  end
end

defmodule Overworld.Test.WalledPacer do
  @moduledoc false
  # Pacers (Overworld.Test.Pacer) whose odd ids game code keeps in their zone: a wall for
  # them at the border.
  use Overworld.Zone
  require Overworld.Entity

  @impl true
  defdelegate init(args), to: Overworld.Test.Pacer

  @impl true
  defdelegate handle_entity(e, view, ctx), to: Overworld.Test.Pacer

  @impl true
  def handle_crossing(e, _from, _to),
    do: if(rem(Overworld.Entity.entity(e, :id), 2) == 1, do: :veto, else: :ok)
end
