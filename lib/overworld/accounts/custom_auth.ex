defmodule Overworld.Accounts.CustomAuth do
  @moduledoc """
  Custom ids: a game's own auth server vouches for an id, and the player gets the account of
  that id (made on first use) like a device id's.

  A module of this behaviour checks what the client sends to `POST /api/v1/auth/custom` (and
  `/api/v1/account/link/custom`): the JSON body as a map. Configure it with
  `Overworld.Server`'s `accounts: [custom_auth: {module, options}]`; `c:init/1` validates the
  options once at start. `Overworld.Accounts.CustomAuth.HMAC` is the built-in one.

  A custom id is 6 to 128 printable ASCII characters without spaces.
  """

  @doc "Validates the options (raise `ArgumentError`); answers what `c:verify/2` gets."
  @callback init(keyword) :: term

  @doc "The custom id the body proves, or why not (a short text the client sees)."
  @callback verify(body :: map, state :: term) :: {:ok, binary} | {:error, binary}

  @doc """
  Tells whether a term is an acceptable custom id.

      iex> Overworld.Accounts.CustomAuth.valid_id?("steam:76561198")
      true
      iex> Overworld.Accounts.CustomAuth.valid_id?("abc")
      false
  """
  @spec valid_id?(term) :: boolean
  def valid_id?(id) when is_binary(id) and byte_size(id) in 6..128,
    do: Overworld.Accounts.valid_device_id?(String.pad_trailing(id, 10, "-"))

  def valid_id?(_id), do: false
end
