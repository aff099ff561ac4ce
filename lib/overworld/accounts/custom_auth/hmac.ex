defmodule Overworld.Accounts.CustomAuth.HMAC do
  @moduledoc """
  Custom ids vouched for with a secret shared by the game's auth server and this server.

  The auth server gives the client an assertion, `id.expires.mac`: the custom id, the unix
  second it expires, and the unpadded base64url HMAC-SHA256 of `"id.expires"` with the
  secret (`sign/4` makes one; any language can). The client posts `{"assertion": "..."}`.
  Options: `secret:` (at least 32 bytes). The id may contain dots: the last two fields are
  the expiry and the MAC.

      iex> alias Overworld.Accounts.CustomAuth.HMAC
      iex> state = HMAC.init(secret: :binary.copy("s", 32))
      iex> a = HMAC.sign(:binary.copy("s", 32), "player.42", 60, 1_700_000_000)
      iex> HMAC.verify(%{"assertion" => a}, state, 1_700_000_030)
      {:ok, "player.42"}
      iex> HMAC.verify(%{"assertion" => a}, state, 1_700_000_060)
      {:error, "assertion expired"}
      iex> HMAC.verify(%{"assertion" => "player.42.1700000060.bad"}, state, 0)
      {:error, "bad assertion signature"}
  """
  @behaviour Overworld.Accounts.CustomAuth

  @impl true
  def init(opts) do
    case Keyword.fetch(opts, :secret) do
      {:ok, s} when is_binary(s) and byte_size(s) >= 32 ->
        %{secret: s}

      _ ->
        raise ArgumentError, "Overworld.Accounts.CustomAuth.HMAC needs secret: (32 bytes or more)"
    end
  end

  @doc "Makes an assertion for `id` valid `ttl` seconds from `now`."
  @spec sign(binary, binary, pos_integer, integer) :: binary
  def sign(secret, id, ttl, now \\ System.system_time(:second)) do
    signed = "#{id}.#{now + ttl}"

    signed <>
      "." <> Base.url_encode64(:crypto.mac(:hmac, :sha256, secret, signed), padding: false)
  end

  @impl true
  def verify(body, state), do: verify(body, state, System.system_time(:second))

  @doc false
  def verify(%{"assertion" => a}, %{secret: secret}, now)
      when is_binary(a) and byte_size(a) <= 512 do
    with [mac64, expires, id] <- a |> String.split(".") |> Enum.reverse() |> split3(),
         {exp, ""} <- Integer.parse(expires),
         {:ok, mac} <- Base.url_decode64(mac64, padding: false),
         true <-
           :crypto.hash_equals(pad(mac), :crypto.mac(:hmac, :sha256, secret, "#{id}.#{expires}")) ||
             :bad_mac,
         true <- now < exp || :expired do
      {:ok, id}
    else
      :expired -> {:error, "assertion expired"}
      _ -> {:error, "bad assertion signature"}
    end
  end

  def verify(_body, _state, _now), do: {:error, "expected a string field \"assertion\""}

  defp split3([mac, exp | id]) when id != [],
    do: [mac, exp, id |> Enum.reverse() |> Enum.join(".")]

  defp split3(_), do: :error

  # hash_equals wants equal sizes.
  defp pad(mac) when byte_size(mac) == 32, do: mac
  defp pad(_mac), do: <<0::256>>
end
