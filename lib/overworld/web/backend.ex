defmodule Overworld.Web.Backend do
  @moduledoc false
  # RPC and match listing over HTTP (docs/protocol.md, "Matches and RPC"): the same calls as
  # the WebSocket's REQUESTs, with the session token in `authorization: Bearer`.

  alias Overworld.Web

  @doc false
  @spec handle(binary, Overworld.Transport.HTTP.Request.t(), Overworld.Server.Config.t()) ::
          Web.response()
  def handle("/api/v1/rpc/" <> id, req, cfg) do
    with {:ok, %{user_id: user}} <- Web.session(req, cfg),
         {:ok, payload} <- payload(req) do
      case Overworld.RPC.call(cfg, URI.decode(id), user, payload) do
        {:ok, json} -> {200, [Overworld.Transport.Conn.json()], Overworld.RPC.payload(json)}
        {:error, 503, code, message} -> Web.error(503, code, message, [{"retry-after", "1"}])
        {:error, status, code, message} -> Web.error(status, code, message)
      end
    end
  end

  def handle("/api/v1/matches/list", req, cfg) do
    with {:ok, _} <- Web.session(req, cfg),
         {:ok, body} <- Web.json_body(req) do
      {status, answer} = Overworld.Session.Backend.Calls.list(body)
      Web.json(status, answer)
    end
  end

  # Any JSON value (an empty body: nil).
  defp payload(%{body: ""}), do: {:ok, nil}

  defp payload(%{body: body}) do
    case Web.decode_json(body, null_term: nil) do
      {:ok, value} -> {:ok, value}
      :error -> Web.error(400, "bad_json", "the body is not valid JSON")
    end
  end
end
