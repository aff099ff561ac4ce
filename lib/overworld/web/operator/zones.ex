defmodule Overworld.Web.Operator.Zones do
  @moduledoc false
  # The zone and session routes of the operator API (`Overworld.Web.Operator`,
  # docs/operator-api.md): list, start, stop, snapshot, history dump, a zone's sessions, kick.
  # Zones are named by their ref (`Overworld.Operators.Zones`), and each action runs on the
  # zone's node.

  alias Overworld.Operators.Zones
  alias Overworld.Web
  alias Overworld.Web.Operator

  @max_reason 100
  # The zone actions written to the audit log, by their names there.
  @audited %{
    ["stop"] => "zone_stop",
    ["snapshot"] => "zone_snapshot",
    ["history"] => "history_download",
    ["rewind"] => "zone_rewind"
  }

  @doc false
  @spec handle([binary], map, Overworld.Server.Config.t(), Overworld.Operators.claims()) ::
          Web.response()
  def handle(["zones"], _req, cfg, _op) do
    %{zones: zones, stopped: stopped} = Zones.list(cfg.zones)
    Web.json(200, %{zones: Web.nulls(zones), stopped: stopped})
  end

  def handle(["zones", "start"], req, cfg, op) do
    with {:ok, body} <- Web.json_body(req) do
      case body do
        %{"name" => name} when is_binary(name) ->
          result = Zones.start(cfg.zones, name)
          Operator.audit(cfg, req, op.name, "zone_start", name, result)
          Operator.answer(result, fn -> %{zone: Web.nulls(elem(result, 1))} end)

        _ ->
          Web.error(400, "invalid_body", "expected a string field \"name\": the zone's name")
      end
    end
  end

  def handle(["zones", ref | action], req, cfg, op) do
    case Zones.find(ref) do
      {:ok, node, id} ->
        zone(action, {ref, node, id}, req, cfg, op)

      {:error, :not_found} = error ->
        if audited = @audited[action], do: Operator.audit(cfg, req, op.name, audited, ref, error)

        Operator.not_found("no running zone has the ref #{Web.printable(ref, 32)}")
    end
  end

  def handle(["sessions", user, "kick"], req, cfg, op) do
    with {:ok, reason} <- reason(req) do
      result =
        case Overworld.Session.kick(user, reason) do
          0 -> {:error, :no_session}
          n -> {:ok, n}
        end

      Operator.audit(cfg, req, op.name, "kick", user, result)
      Operator.answer(result, fn -> %{kicked: elem(result, 1)} end)
    end
  end

  def handle(["sessions", user, "interest"], _req, _cfg, _op) do
    case Overworld.Operators.Sessions.interest(user) do
      {:ok, view} ->
        Web.json(200, Map.update!(view, :zone, &Overworld.Operators.Zones.text/1))

      {:error, :no_session} ->
        Operator.not_found("#{Web.printable(user, 64)} has no session")

      {:error, :no_view} ->
        Web.error(409, "no_view", "the session has sent no frame yet")
    end
  end

  defp zone(["stop"], {ref, node, id}, req, cfg, op) do
    result = Zones.run(node, id, :stop_here)
    Operator.audit(cfg, req, op.name, "zone_stop", target(ref, id), result)
    Operator.answer(result, fn -> %{stopped: ref} end)
  end

  defp zone(["snapshot"], {ref, node, id}, req, cfg, op) do
    result = Zones.run(node, id, :snapshot_here)
    Operator.audit(cfg, req, op.name, "zone_snapshot", target(ref, id), result)
    Operator.answer(result, fn -> %{tick: elem(result, 1)} end)
  end

  defp zone(["history"], {ref, node, id}, req, cfg, op) do
    result = Zones.run(node, id, :history_here)
    Operator.audit(cfg, req, op.name, "history_download", target(ref, id), result)

    case result do
      {:ok, bytes, last} ->
        {200,
         [
           {"content-type", "application/octet-stream"},
           {"content-disposition", ~s(attachment; filename="history-#{ref}-#{last}.owh")}
         ], bytes}

      error ->
        Operator.answer(error, nil)
    end
  end

  defp zone(["sessions"], {_ref, node, id}, req, _cfg, _op) do
    with {:ok, limit} <- Operator.limit(Web.query(req), 100, 1_000) do
      case Zones.run(node, id, :sessions_here, [limit]) do
        {:ok, sessions, total} -> Web.json(200, %{sessions: Web.nulls(sessions), total: total})
        error -> Operator.answer(error, nil)
      end
    end
  end

  # The visualizer's: an entity's whole state, the history's range and past states, rewind
  # (`Overworld.Web.Inspect`, run on the zone's node).
  defp zone(["entities", entity], {_ref, node, id}, _req, _cfg, _op),
    do: inspect_on(node, id, :show_entity, [entity])

  defp zone(["obstacles"], {_ref, node, id}, _req, _cfg, _op),
    do: inspect_on(node, id, :obstacles, [])

  defp zone(["history", "range"], {_ref, node, id}, _req, _cfg, _op),
    do: inspect_on(node, id, :history_range, [])

  defp zone(["history", "state"], {_ref, node, id}, req, _cfg, _op),
    do: inspect_on(node, id, :history_state, [Web.query(req)])

  defp zone(["rewind"], {ref, node, id}, req, cfg, op) do
    with {:ok, body} <- Web.json_body(req) do
      {status, _, reply} = answer = inspect_on(node, id, :rewind, [body])
      # (Audited with the code of the answer's error.)
      result =
        with true <- status != 200,
             {:ok, %{"error" => code}} <- Web.decode_json(IO.iodata_to_binary(reply)) do
          {:refused, code}
        else
          _ -> :ok
        end

      target = "#{target(ref, id)} to #{inspect(body["tick"])}"
      Operator.audit(cfg, req, op.name, "zone_rewind", target, result)
      answer
    end
  end

  defp target(ref, id), do: "#{ref} #{Zones.text(id)}"

  defp inspect_on(node, id, fun, args) do
    case Zones.run(node, id, {Overworld.Web.Inspect, fun}, args) do
      {:error, {:node, _}} = error -> Operator.answer(error, nil)
      answer -> answer
    end
  end

  # A kick's reason: the body's "reason" (printable, at most 100 bytes), else a default.
  defp reason(%{body: body}) when body in ["", nil], do: {:ok, "by an operator"}

  defp reason(req) do
    with {:ok, body} <- Web.json_body(req) do
      case body do
        %{"reason" => r} when is_binary(r) and byte_size(r) in 1..@max_reason ->
          if String.printable?(r),
            do: {:ok, r},
            else: Web.error(400, "invalid_body", "the reason must be printable text")

        %{"reason" => _} ->
          Web.error(400, "invalid_body", "the reason is text of 1 to #{@max_reason} bytes")

        _ ->
          {:ok, "by an operator"}
      end
    end
  end
end
