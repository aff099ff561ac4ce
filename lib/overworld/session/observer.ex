defmodule Overworld.Session.Observer do
  @moduledoc false
  # An operator's observer connection (the live visualizer): a session with no avatar that
  # sees a whole zone, or a whole world of zones, over the same protocol as the players
  # (HANDSHAKE, then SNAPSHOT frames built by `Overworld.Interest` from the cell blocks the
  # zone's workers encode once per tick). So every frame the visualizer draws went through
  # the real encoder and the real client decoder.
  #
  # * Its view: the observer stands at the centre of the zone's (the world's) area with a
  #   view radius reaching every corner, and a byte budget of its own (the server option
  #   `observers:`), so nothing of the zone is left out while the budget holds.
  # * At most `observers: [max: n]` observers per server at once (default 3): each holds one
  #   of n registry slots while it lives (`Overworld.Names.observer/2`); one more is closed
  #   with 4008. No process counts them: a slot goes with its holder.
  # * It sends nothing to the zone: inputs are dropped (counted), events, requests and match
  #   messages close it with 4002. The zone does not know it (no player, no entity).
  # * A restarted zone server is subscribed to again and the view starts over from
  #   keyframes, as a player's session's (`Overworld.Session.Hello.reattach/3`).
  # * Its frames are a whole zone's (a keyframe of 40,000 entities is about a megabyte): its
  #   socket gets a bound of its own (`observers: [max_outbound: ...]`, with the send buffer
  #   and the port's watermarks scaled as a player's are from `:max_outbound`); past it,
  #   frames are skipped (coalesced) as a player's are, and it is closed as too slow only
  #   past that bound.
  # * Its operator logs out, or gets a new password, or is removed (`revoked/1`): each of its
  #   observers checks its token again and one refused is closed with 4003.

  alias Overworld.{Names, Session}
  alias Overworld.Session.Hello

  @doc """
  The observer's HELLO, after the operator's token was checked (`operator`: its name): the
  slot taken, the zone (the world) subscribed to, HANDSHAKE sent (avatar id 0).
  """
  @spec hello(Session.t(), binary, binary) :: {:ok, Session.t()} | tuple
  def hello(st, operator, token) do
    st = %{
      st
      | user: "operator:" <> operator,
        observer: operator,
        claims: {:operator, token},
        max_outbound: st.cfg.observers.max_outbound
    }

    with {:ok, st} <- slot(st, operator, st.cfg.observers.max),
         :ok <- Session.bound_outbound(st.sock, st.cfg.observers.max_outbound),
         {:ok, home} <- home(st),
         {:ok, config} <- Hello.zone_config(home),
         view = [radius: radius_m(config), budget: st.cfg.observers.budget],
         {:ok, pid, mon, obs} <- Hello.watch(st, home, config, view) do
      Session.send_msg(st, Hello.handshake(config, 0))

      {:ok,
       %{
         st
         | zone: home,
           zone_pid: pid,
           zone_mon: mon,
           table: config.shared.wire,
           obs: obs,
           pos: centre(config),
           module: config.module,
           input: config.wire.__input__()
       }}
    else
      {:error, :no_zone} ->
        Session.close(st, 4006, "an observer watches a zone: name it in the URL (zone=)", 6)

      {:error, why} ->
        Session.close(st, 4006, "zone unavailable: #{inspect(why)}", 6)

      closed ->
        closed
    end
  end

  @doc """
  Tells the observers of `operator`, on every node of the cluster, that its tokens may have
  been revoked (a logout, a new password, removed): each checks its own again (`check/2`).
  """
  @spec revoked(String.t()) :: :ok
  def revoked(operator) do
    :erpc.multicast(Overworld.Cluster.live(), __MODULE__, :revoked_here, [operator])
    :ok
  end

  @doc false
  def revoked_here(operator) do
    for pid <- Names.observers_of(operator), do: send(pid, :overworld_revoked)
    :ok
  end

  @doc "Whether the observer's operator token is still good: `:ok` or `{:error, why}`."
  @spec check(Session.t()) :: :ok | {:error, term}
  def check(%{claims: {:operator, token}, cfg: cfg}) do
    case Overworld.Operators.verify(cfg, token) do
      {:ok, _} -> :ok
      {:error, why} -> {:error, why}
    end
  end

  # One of the server's `max` observer slots (its value: the operator's name, for
  # `revoked_here/1`), or closed: full.
  defp slot(st, operator, max) do
    if Enum.any?(
         1..max//1,
         &match?({:ok, _}, Names.register(Names.observer(st.cfg.name, &1), operator))
       ),
       do: {:ok, st},
       else:
         Session.close(
           st,
           4008,
           "retry_after=5; at most #{max} observers at once on this server",
           8
         )
  end

  # The zone whose ticks pace the frames: the zone, or a world's first zone.
  defp home(%{zone: nil}), do: {:error, :no_zone}

  defp home(%{zone: {:world, name}}) do
    case Overworld.World.zones(name) |> Enum.sort() do
      [] -> {:error, :not_running}
      [zone | _] -> {:ok, zone}
    end
  end

  defp home(%{zone: zone}), do: {:ok, zone}

  # The centre of the zone's (the world's) area, in units.
  defp centre(config), do: {div(config.width, 2), div(config.height, 2)}

  # A view radius (metres) from the centre that reaches every corner.
  defp radius_m(config) do
    half_diagonal = :math.sqrt(config.width * config.width + config.height * config.height) / 2
    ceil(half_diagonal / Overworld.Entity.meters(1)) + 1
  end
end
