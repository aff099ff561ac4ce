defmodule Overworld.Session.Backend.Calls do
  @moduledoc false
  # The REQUESTs a session runs apart from itself (Overworld.Session.Backend): each answers
  # {status, body}.

  alias Overworld.{Match, RPC}

  # (A body is a map, or JSON text already: {:json, iodata}.)
  @spec run(binary, map, binary, Overworld.Server.Config.t(), pid) ::
          {pos_integer, map | {:json, iodata}}
  def run("rpc", args, user, cfg, _session) do
    case args do
      %{"id" => id} when is_binary(id) ->
        case RPC.call(cfg, id, user, Map.get(args, "payload")) do
          {:ok, json} -> {200, {:json, RPC.payload(json)}}
          {:error, status, code, message} -> {status, %{error: code, message: message}}
        end

      _ ->
        {400, %{error: "invalid_request", message: "id: expected a string"}}
    end
  end

  def run("match_list", args, _user, _cfg, _session), do: list(args)

  @doc false
  # A listing from a JSON request (WebSocket or HTTP).
  @spec list(map) :: {pos_integer, map}
  def list(args) do
    opts =
      for {k, key} <- [
            {"query", :query},
            {"min_size", :min_size},
            {"max_size", :max_size},
            {"limit", :limit}
          ],
          Map.has_key?(args, k),
          do: {key, args[k]}

    case Match.list(opts) do
      {:ok, matches} -> {200, %{matches: matches}}
      {:error, message} -> {400, %{error: "invalid_query", message: message}}
    end
  end
end
