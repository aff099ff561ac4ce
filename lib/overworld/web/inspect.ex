defmodule Overworld.Web.Inspect do
  @moduledoc false
  # The visualizer's operator routes (docs/operator-api.md, "The visualizer"): what the
  # protocol does not carry. An entity's whole server-side state, a debug zone's history
  # (its range of ticks, the entities at any of them: `Overworld.Zone.state_at/2`) and its
  # rewind (`Overworld.Zone.rewind/2`). The caller has checked the operator's token and
  # resolved the zone; each function answers a `Overworld.Web.response()`.
  #
  # Positions go out in metres (floats), as the client's decoded fields do; any other term of
  # the entity (its kind, state, data, owner, input) as JSON when it is one, else printed. An
  # entity's `template` is the name of its kind's template in the zone's wire module, as the
  # handshake lists it (a client finds its fields and colours by it; a template may cover
  # several kinds: the goblin world's `goblin` covers goblins and warlords), else its kind
  # printed (a zone without a wire, a kind not replicated); `kind` is the kind printed.

  require Overworld.Entity
  import Overworld.Entity, only: [entity: 2]

  alias Overworld.Web

  @typep zone :: term

  @doc "An entity by id (text from the path): every field, its cell and zone, or 404."
  @spec show_entity(zone, binary) :: Web.response()
  def show_entity(zone, id_text) do
    with {:ok, id} <- positive(id_text, "entity id"),
         {:ok, config} <- config(zone) do
      case Overworld.Zone.entity(zone, id) do
        nil ->
          Web.error(404, "not_found", "no entity #{id} in this zone")

        e ->
          x = entity(e, :x)
          y = entity(e, :y)
          kind = entity(e, :kind)

          Web.json(200, %{
            id: id,
            template: Map.get(template_names(config), kind, printed(kind)),
            kind: printed(kind),
            zone: inspect(zone),
            cell: Overworld.Spatial.Grid.key(config.grid, x, y),
            owner: printed(entity(e, :owner)),
            state: %{
              x: metres(x),
              y: metres(y),
              vx: metres(entity(e, :vx)),
              vy: metres(entity(e, :vy)),
              heading: entity(e, :heading),
              state: printed(entity(e, :state)),
              data: printed(entity(e, :data)),
              input: printed(entity(e, :input)),
              rng: printed(entity(e, :rng))
            }
          })
      end
    end
  catch
    :exit, _ -> Web.error(404, "not_found", "the zone is not running")
  end

  @doc """
  The zone's static obstacles (its physics map, docs/sidecar.md), in metres, for the
  visualizer to draw: `width`, `height`, `boxes` (`[x0, y0, x1, y1]`) and `circles`
  (`[cx, cy, r]`); empty lists for a zone without physics or map.
  """
  @spec obstacles(zone) :: Web.response()
  def obstacles(zone) do
    with {:ok, c} <- config(zone) do
      {boxes, circles} =
        case c.physics do
          nil -> {[], []}
          p -> {Tuple.to_list(p.world.boxes), Tuple.to_list(p.world.circles)}
        end

      in_metres = &(&1 |> Tuple.to_list() |> Enum.map(fn u -> metres(u) end))

      Web.json(200, %{
        width: metres(c.width),
        height: metres(c.height),
        boxes: Enum.map(boxes, in_metres),
        circles: Enum.map(circles, in_metres)
      })
    end
  end

  @doc "The ticks a zone's history holds: `{oldest, newest, tick_rate, debug}`; 409 without."
  @spec history_range(zone) :: Web.response()
  def history_range(zone) do
    with {:ok, dump} <- dump(zone) do
      Web.json(200, %{
        oldest: dump.keyframe.tick,
        newest: Overworld.Zone.History.last_tick(dump),
        tick_rate: dump.config.tick_rate,
        debug: dump.config.debug
      })
    end
  end

  @doc "The entities after a past tick (`?tick=N`) of the zone's history: ids, templates, kinds, metres."
  @spec history_state(zone, map) :: Web.response()
  def history_state(zone, query) do
    with {:ok, tick} <- non_negative(query["tick"], "tick"),
         {:ok, dump} <- dump(zone) do
      case Overworld.Zone.History.state_at(dump, tick) do
        {:ok, cells, _game} ->
          names = template_names(dump.config)

          entities =
            for {_key, list} <- cells, e <- list do
              kind = entity(e, :kind)

              %{
                id: entity(e, :id),
                template: Map.get(names, kind, printed(kind)),
                kind: printed(kind),
                x: metres(entity(e, :x)),
                y: metres(entity(e, :y))
              }
            end

          Web.json(200, %{tick: tick, entities: entities})

        {:error, {:out_of_range, first..last}} ->
          Web.error(409, "out_of_range", "tick #{tick} is not kept: #{first}..#{last} are")
      end
    end
  end

  @doc """
  Rewinds a debug zone to `{"tick": N}`: `{"tick": N}` once done, or 409 with the reason (not
  a debug zone, a zone of a world, a tick no longer kept).
  """
  @spec rewind(zone, map) :: Web.response()
  def rewind(zone, body) do
    with {:ok, tick} <- non_negative(body["tick"], "tick") do
      case Overworld.Zone.rewind(zone, tick) do
        {:ok, n} ->
          Web.json(200, %{tick: n})

        {:error, :not_debug} ->
          Web.error(409, "not_debug", "only a debug zone (debug: true) is rewound")

        {:error, :in_world} ->
          Web.error(
            409,
            "in_world",
            "a zone of a world is not rewound alone: its neighbours hold the entities that " <>
              "crossed since, which would then exist twice"
          )

        {:error, {:out_of_range, first..last}} ->
          Web.error(409, "out_of_range", "tick #{tick} is not kept: #{first}..#{last} are")

        {:error, :not_found} ->
          Web.error(404, "not_found", "the zone is not running")

        {:error, why} ->
          Web.error(409, "not_rewound", "the zone was not rewound: #{inspect(why)}")
      end
    end
  end

  defp dump(zone) do
    case Overworld.Zone.history(zone) do
      {:ok, dump} -> {:ok, dump}
      error -> Overworld.Web.Operator.answer(error, nil)
    end
  end

  defp config(zone) do
    case Overworld.Zone.config(zone) do
      nil -> Overworld.Web.Operator.answer({:error, :not_found}, nil)
      config -> {:ok, config}
    end
  end

  defp positive(text, what) do
    case non_negative(text, what) do
      {:ok, n} when n > 0 -> {:ok, n}
      {:ok, _} -> Web.error(400, "invalid_request", "#{what}: expected a positive integer")
      error -> error
    end
  end

  defp non_negative(n, _what) when is_integer(n) and n >= 0, do: {:ok, n}

  defp non_negative(text, what) when is_binary(text) and byte_size(text) <= 20 do
    case Integer.parse(text) do
      {n, ""} when n >= 0 -> {:ok, n}
      _ -> Web.error(400, "invalid_request", "#{what}: expected a non-negative integer")
    end
  end

  defp non_negative(_other, what),
    do: Web.error(400, "invalid_request", "#{what}: expected a non-negative integer")

  defp metres(units), do: units / Overworld.Entity.unit()

  # Entity kind => the name of its template in the zone's wire module (none without a wire).
  defp template_names(%{wire: wire, wire_kinds: kinds}) when wire != nil do
    templates = List.to_tuple(wire.__templates__())
    Map.new(kinds, fn {kind, i} -> {kind, printed(elem(templates, i).name)} end)
  end

  defp template_names(_config), do: %{}

  # A term as JSON when it is one (numbers, strings, booleans, nil, lists and maps of them,
  # atoms as their names), else as Elixir prints it.
  defp printed(nil), do: :null
  defp printed(v) when is_boolean(v) or is_number(v), do: v
  defp printed(v) when is_atom(v), do: Atom.to_string(v)

  defp printed(v) when is_binary(v),
    do: if(String.printable?(v), do: v, else: inspect(v, limit: 50))

  defp printed(v) when is_list(v) do
    if Enum.all?(v, &json_key_free?/1),
      do: Enum.map(v, &printed/1),
      else: inspect(v, limit: 50, printable_limit: 200)
  end

  defp printed(v) when is_map(v) do
    if Enum.all?(Map.keys(v), &(is_atom(&1) or is_binary(&1))),
      do: Map.new(v, fn {k, val} -> {printed(k), printed(val)} end),
      else: inspect(v, limit: 50, printable_limit: 200)
  end

  defp printed(v), do: inspect(v, limit: 50, printable_limit: 200)

  # (A keyword list's pairs are tuples: printed whole.)
  defp json_key_free?(v), do: not is_tuple(v)
end
