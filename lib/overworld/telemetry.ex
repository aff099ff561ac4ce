defmodule Overworld.Telemetry do
  @moduledoc """
  Telemetry-style events. Every event Overworld emits goes through `execute/3` and is listed
  here. Durations are in `:native` time units (convert with `System.convert_time_unit/3`).

  | event | measurements | metadata |
  | ----- | ------------ | -------- |
  | `[:overworld, :zone, :start]` | `system_time` | `zone`, `module`, `workers`, `tick_rate` |
  | `[:overworld, :zone, :tick, :stop]` | `duration`, `input`, `systems`, `grid`, `other`, `entities`, `lateness` | `zone`, `tick` |
  | `[:overworld, :zone, :overrun]` | `duration`, `skipped` | `zone`, `tick` |
  | `[:overworld, :zone, :callback, :exception]` | `count` | `zone`, `tick`, `callback`, `kind`, `reason` |
  | `[:overworld, :zone, :recovered]` | `duration` | `zone`, `from` (`:memory` or `:store`), `tick` |

  * `tick.stop`: `duration` is the whole tick (from the clock firing to the last worker done);
    `input` the input phase, `systems` the slowest worker's simulation pass, `grid` the slowest
    worker's grid update and border exchange, `other` the rest (game `handle_tick/2`, messaging).
    `lateness` is how long after its deadline the tick started.
  * `overrun`: a tick ended after the next tick's deadline; `skipped` deadlines are dropped, not
    run in a burst.
  * `callback.exception`: game code raised, threw or exited (or returned something invalid);
    `count` is the number of failures it stands for (a worker reports a tick's failures at once).
  * `recovered`: a restarted zone server is about to run its first tick; `duration` is from the
    start of its `init` (the zone's state from memory, or loaded from its store).

  Handlers run in the process that emits the event: the tick events in the zone server, between
  ticks, so a slow handler delays the zone; keep them cheap (send a message, bump a counter).
  Handlers are kept in `:persistent_term` (attach and detach are rare, execute is hot and
  lock-free). A handler that raises is detached and logged, as in the `telemetry` library.
  """
  require Logger

  @type event :: [atom, ...]
  @type handler :: (event, map, map, term -> any)

  @events [
    [:overworld, :zone, :start],
    [:overworld, :zone, :tick, :stop],
    [:overworld, :zone, :overrun],
    [:overworld, :zone, :callback, :exception],
    [:overworld, :zone, :recovered]
  ]

  @doc "The events Overworld emits."
  @spec events() :: [event]
  def events, do: @events

  @doc """
  Attaches `fun` to `event` (one of `events/0`) under a unique `id`. Returns
  `{:error, :already_exists}` if the id is taken for that event.
  """
  @spec attach(term, event, handler, term) :: :ok | {:error, :already_exists}
  def attach(id, event, fun, config \\ nil) when is_list(event) and is_function(fun, 4) do
    unless event in @events do
      raise ArgumentError, "unknown event #{inspect(event)}, expected one of #{inspect(@events)}"
    end

    :global.trans({__MODULE__, self()}, fn ->
      handlers = handlers(event)

      if List.keymember?(handlers, id, 0) do
        {:error, :already_exists}
      else
        :persistent_term.put(key(event), handlers ++ [{id, fun, config}])
        :ok
      end
    end)
  end

  @doc "Detaches the handler `id` from every event it is attached to."
  @spec detach(term) :: :ok
  def detach(id) do
    for event <- @events, List.keymember?(handlers(event), id, 0) do
      :persistent_term.put(key(event), List.keydelete(handlers(event), id, 0))
    end

    :ok
  end

  @doc "Emits an event to its handlers, in the caller's process."
  @spec execute(event, map, map) :: :ok
  def execute(event, measurements, metadata) do
    case :persistent_term.get(key(event), []) do
      [] ->
        :ok

      handlers ->
        Enum.each(handlers, fn {id, fun, config} ->
          try do
            fun.(event, measurements, metadata, config)
          catch
            kind, reason ->
              Logger.error(
                "telemetry handler #{inspect(id)} for #{inspect(event)} failed and was " <>
                  "detached: " <> Exception.format(kind, reason, __STACKTRACE__)
              )

              detach(id)
          end
        end)
    end
  end

  defp handlers(event), do: :persistent_term.get(key(event), [])
  defp key(event), do: {__MODULE__, event}
end
