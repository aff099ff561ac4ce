defmodule Overworld.Web.StorageTest do
  # The storage routes over real sockets, with a witness player that keeps receiving snapshots
  # through every bad request.
  use ExUnit.Case, async: true
  import Overworld.Test.ServerCase

  alias Overworld.Client

  @name Overworld.Web.StorageTest.Server

  setup do
    world =
      start_world(@name, {__MODULE__, :critters}, critters: 50, storage: [max_object_bytes: 1024])

    %{"token" => token, "user_id" => user} = auth(world)
    {:ok, world: world, token: token, user: user}
  end

  defp call(w, method, path, token, body \\ nil) do
    headers = if token, do: [headers: [{"authorization", "Bearer " <> token}]], else: []
    body = if body, do: :jiffy.encode(body), else: ""
    {:ok, status, _headers, reply} = Client.request(host(), w.port, method, path, body, headers)
    {status, :jiffy.decode(reply, [:return_maps, {:null_term, nil}])}
  end

  defp fresh, do: "c" <> Base.encode16(:crypto.strong_rand_bytes(5), case: :lower)

  test "write, read, list and delete a user's objects", %{world: w, token: t, user: u} do
    c = fresh()

    assert {200, %{"acks" => [%{"key" => "a", "user_id" => ^u, "version" => v}, _]}} =
             call(w, "POST", "/api/v1/storage/write", t, %{
               objects: [
                 %{collection: c, key: "a", value: %{hp: 3}},
                 %{collection: c, key: "b", value: ~s({"n":1}), read: 2, version: "*"}
               ]
             })

    assert {200, %{"objects" => [o]}} =
             call(w, "POST", "/api/v1/storage/read", t, %{
               object_ids: [%{collection: c, key: "a", user_id: u}]
             })

    assert {o["value"], o["version"], o["read"], o["write"]} == {~s({"hp":3}), v, 1, 1}

    assert {200, %{"objects" => [%{"key" => "a"}], "cursor" => cursor}} =
             call(w, "GET", "/api/v1/storage/list?collection=#{c}&user_id=#{u}&limit=1", t)

    assert {200, %{"objects" => [%{"key" => "b"}], "cursor" => nil}} =
             call(
               w,
               "GET",
               "/api/v1/storage/list?collection=#{c}&user_id=#{u}&limit=1&cursor=#{URI.encode_www_form(cursor)}",
               t
             )

    # Another user sees the public one only, and cannot delete it.
    %{"token" => t2} = auth(w)

    assert {200, %{"objects" => [%{"key" => "b"}], "cursor" => nil}} =
             call(w, "GET", "/api/v1/storage/list?collection=#{c}", t2)

    assert {403, %{"error" => "permission_denied"}} =
             call(w, "POST", "/api/v1/storage/delete", t2, %{
               object_ids: [%{collection: c, key: "b", user_id: u}]
             })

    assert {409, %{"error" => "version_conflict", "message" => "item 0:" <> _}} =
             call(w, "POST", "/api/v1/storage/write", t, %{
               objects: [%{collection: c, key: "b", value: %{}, version: "*"}]
             })

    assert {200, %{}} =
             call(w, "POST", "/api/v1/storage/delete", t, %{
               object_ids: [%{collection: c, key: "a", version: v}]
             })

    assert {200, %{"objects" => [%{"key" => "b"}]}} =
             call(w, "GET", "/api/v1/storage/list?collection=#{c}", t)
  end

  test "bad requests get clear errors; the server and its players carry on", %{world: w, token: t} do
    witness = join(w)
    c = fresh()

    assert {401, %{"error" => "invalid_token"}} =
             call(w, "POST", "/api/v1/storage/read", nil, %{object_ids: []})

    assert {401, %{"error" => "invalid_token"}} =
             call(w, "POST", "/api/v1/storage/read", "garbage", %{object_ids: []})

    assert {400, %{"error" => "invalid_body"}} =
             call(w, "POST", "/api/v1/storage/write", t, %{objects: "no"})

    assert {400, %{"error" => "invalid_request", "message" => "item 1: collection must be" <> _}} =
             call(w, "POST", "/api/v1/storage/write", t, %{
               objects: [%{collection: c, key: "k", value: %{}}, %{key: "k", value: %{}}]
             })

    assert {413, %{"error" => "too_large"}} =
             call(w, "POST", "/api/v1/storage/write", t, %{
               objects: [%{collection: c, key: "k", value: %{x: String.duplicate("y", 2_000)}}]
             })

    assert {400, %{"error" => "invalid_request"}} = call(w, "GET", "/api/v1/storage/list", t)

    assert {400, %{"error" => "invalid_request"}} =
             call(w, "GET", "/api/v1/storage/list?collection=#{c}&limit=x", t)

    assert {400, %{"error" => "invalid_request"}} =
             call(w, "GET", "/api/v1/storage/list?collection=#{c}&cursor=%%%", t)

    assert {405, _} = call(w, "GET", "/api/v1/storage/write", t)

    # Nothing of the refused batch was written.
    assert {200, %{"objects" => [], "cursor" => nil}} =
             call(w, "GET", "/api/v1/storage/list?collection=#{c}", t)

    alive!(witness, w)
  end
end
