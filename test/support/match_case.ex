defmodule Overworld.Test.MatchCase do
  @moduledoc false
  # Players of matches over real WebSockets, connected to no zone: requests (REQUEST →
  # RESPONSE), match data and notifications.
  import ExUnit.Assertions
  import Overworld.Test.ServerCase

  alias Overworld.{Client, Protocol}

  # A player connected to no zone: {conn, user, token}, with a mailbox of what it received.
  def player(w) do
    auth = auth(w)
    conn = connect(w, "/ws?zone=")

    :ok =
      Client.send_msg(conn, %{type: :hello, version: Protocol.version(), token: auth["token"]})

    {%{type: :handshake}, conn} = recv_msg(conn)
    %{conn: conn, user: auth["user_id"], token: auth["token"], auth: auth}
  end

  def request(p, method, body) do
    id = System.unique_integer([:positive])

    :ok =
      Client.send_msg(p.conn, %{type: :request, id: id, method: method, body: :jiffy.encode(body)})

    {p, msg} = until(p, &match?(%{type: :response, id: ^id}, &1))
    {p, msg.status, :jiffy.decode(msg.body, [:return_maps, {:null_term, nil}])}
  end

  # Receives until a message matches; the others are kept in the player's :seen (oldest first).
  def until(p, pred, timeout \\ 2_000) do
    seen = Map.get(p, :seen, [])

    case Enum.split_while(seen, &(not pred.(&1))) do
      {before, [msg | rest]} -> {Map.put(p, :seen, before ++ rest), msg}
      _ -> receive_until(p, pred, timeout)
    end
  end

  defp receive_until(p, pred, timeout) do
    {msg, conn} = recv_msg(p.conn, timeout)
    p = %{p | conn: conn}

    cond do
      match?({:error, _}, msg) or match?({:close, _, _}, msg) ->
        flunk("socket ended: #{inspect(msg)}")

      pred.(msg) ->
        {p, msg}

      true ->
        receive_until(Map.update(p, :seen, [msg], &(&1 ++ [msg])), pred, timeout)
    end
  end

  def send_data(p, match_id, op, data),
    do:
      :ok =
        Client.send_msg(p.conn, %{type: :match_send, match_id: match_id, op: op, payload: data})

  def data(p), do: until(p, &match?(%{type: :match_data}, &1))
  def notify(p, kind), do: until(p, &match?(%{type: :notify, kind: ^kind}, &1))

  def create(p, name \\ "echo", params \\ %{}) do
    {p, 200, %{"match_id" => id}} = request(p, "match_create", %{name: name, params: params})
    {p, id}
  end

  def player_again(w, p) do
    conn = connect(w, "/ws?zone=")
    :ok = Client.send_msg(conn, %{type: :hello, version: Protocol.version(), token: p.token})
    {%{type: :handshake}, conn} = recv_msg(conn)
    %{p | conn: conn}
  end

  def raw_request(p, method, body) do
    :ok = Client.send_msg(p.conn, %{type: :request, id: 1, method: method, body: body})
    {p, msg} = until(p, &match?(%{type: :response, id: 1}, &1))
    {p, msg.status, :jiffy.decode(msg.body, [:return_maps])}
  end
end
