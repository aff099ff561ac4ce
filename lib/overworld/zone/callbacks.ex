defmodule Overworld.Zone.Callbacks do
  @moduledoc false
  # The boundary between the zone server and game code: calls a callback of the zone module and
  # turns a raise, throw or exit into `{:error, ...}` after logging it with the zone id and tick,
  # counting it in the zone's metrics and emitting [:overworld, :zone, :callback, :exception].

  require Logger
  alias Overworld.Telemetry
  alias Overworld.Zone.{Config, Metrics}

  @type where :: %{config: Config.t(), metrics: Metrics.t(), tick: non_neg_integer}

  @spec call(where, atom, [term]) :: {:ok, term} | {:error, atom, term, list}
  def call(where, callback, args) do
    {:ok, apply(where.config.module, callback, args)}
  catch
    kind, reason ->
      failed(where, callback, kind, reason, __STACKTRACE__)
      {:error, kind, reason, __STACKTRACE__}
  end

  @doc "Reports an invalid return value (the zone keeps its previous state)."
  @spec bad_return(where, atom, term) :: :ok
  def bad_return(where, callback, value),
    do: failed(where, callback, :error, {:bad_return, value}, nil)

  @doc "Reports a failure of game code."
  @spec failed(where, atom, atom, term, list | nil) :: :ok
  def failed(%{config: config, metrics: metrics, tick: tick}, callback, kind, reason, stack) do
    Metrics.add(metrics, :callback_errors, 1)

    Telemetry.execute(
      [:overworld, :zone, :callback, :exception],
      %{count: 1},
      %{zone: config.id, tick: tick, callback: callback, kind: kind, reason: reason}
    )

    detail = if stack, do: Exception.format(kind, reason, stack), else: inspect(reason, limit: 20)

    Logger.error(
      "zone #{inspect(config.id)} tick #{tick}: #{inspect(config.module)}.#{callback} " <>
        "failed; the zone keeps its previous state: " <> detail,
      tick: tick
    )
  end
end
