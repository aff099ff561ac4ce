defmodule Overworld.Web.Storage do
  @moduledoc false
  # The storage routes of `Overworld.Web` (docs/protocol.md, "Storage"), for the user of the
  # session token in `authorization: Bearer <token>`:
  #
  #   POST /api/v1/storage/write   {"objects": [write]}            → {"acks": [ack]}
  #   POST /api/v1/storage/read    {"object_ids": [id]}            → {"objects": [object]}
  #   POST /api/v1/storage/delete  {"object_ids": [delete]}        → {}
  #   GET  /api/v1/storage/list?collection=C[&user_id=U][&limit=N][&cursor=X]
  #                                                                → {"objects": [...], "cursor": X | null}
  #
  # An object's `value` is its JSON text (a string); a write's `value` is a JSON object or its
  # text. Errors: 400 invalid input (the message names the item), 401 no or bad token, 403 a
  # permission, 409 a version condition, 413 too large, 503 storage unavailable.
  require Logger

  alias Overworld.Web

  @doc false
  @spec handle(binary, Overworld.Transport.HTTP.Request.t(), map) :: Web.response()
  def handle(path, req, cfg) do
    with {:ok, user} <- user(req, cfg),
         {:ok, store} <- store(cfg) do
      caller = {:user, user}

      case path do
        "/api/v1/storage/write" ->
          with {:ok, items} <- list_field(req, "objects") do
            respond(Overworld.Storage.write(store, caller, items), &%{acks: &1})
          end

        "/api/v1/storage/read" ->
          with {:ok, items} <- list_field(req, "object_ids") do
            respond(Overworld.Storage.read(store, caller, items), &%{objects: &1})
          end

        "/api/v1/storage/delete" ->
          with {:ok, items} <- list_field(req, "object_ids") do
            respond(Overworld.Storage.delete(store, caller, items), fn -> %{} end)
          end

        "/api/v1/storage/list" ->
          list(store, caller, Web.query(req))
      end
    end
  end

  defp list(store, caller, q) do
    with {:ok, limit} <- limit(q["limit"]) do
      opts = [user_id: q["user_id"], limit: limit, cursor: q["cursor"]]

      case Overworld.Storage.list(store, caller, q["collection"] || "", opts) do
        {:ok, objects, cursor} -> Web.json(200, %{objects: objects, cursor: cursor || :null})
        error -> respond(error, nil)
      end
    end
  end

  defp limit(nil), do: {:ok, 20}

  defp limit(text) do
    case Integer.parse(text) do
      {n, ""} -> {:ok, n}
      _ -> Web.error(400, "invalid_request", "limit must be an integer")
    end
  end

  defp user(req, cfg) do
    with {:ok, %{user_id: user}} <- Web.session(req, cfg), do: {:ok, user}
  end

  defp store(%{storage: nil}),
    do: Web.error(404, "not_found", "this server has no storage")

  defp store(%{storage: store}), do: {:ok, store}

  defp list_field(req, name) do
    with {:ok, body} <- Web.json_body(req) do
      case body do
        %{^name => items} when is_list(items) -> {:ok, items}
        _ -> Web.error(400, "invalid_body", "expected a JSON object with a list #{inspect(name)}")
      end
    end
  end

  defp respond(:ok, fun), do: Web.json(200, fun.())
  defp respond({:ok, result}, fun), do: Web.json(200, fun.(result))

  defp respond({:error, reason}, _fun) do
    case reason do
      {:invalid, i, message} ->
        Web.error(400, "invalid_request", "item #{i}: #{message}")

      {:too_large, i, bytes, max} ->
        Web.error(413, "too_large", "item #{i}: the value is #{bytes} bytes, at most #{max}")

      {:batch_too_large, n, max} ->
        Web.error(413, "too_large", "#{n} items, at most #{max} in one call")

      {:version_conflict, i} ->
        Web.error(409, "version_conflict", "item #{i}: the version condition does not hold")

      {:permission_denied, i} ->
        Web.error(403, "permission_denied", "item #{i}: not yours to write or delete")

      {:bad_cursor, _} ->
        Web.error(400, "invalid_request", "bad cursor")

      :no_quorum ->
        Web.error(503, "no_quorum", "this node sees no majority of its cluster: try another node")

      other ->
        Logger.error("storage: #{inspect(other)}")
        Web.error(503, "unavailable", "storage unavailable")
    end
  end
end
