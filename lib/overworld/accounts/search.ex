defmodule Overworld.Accounts.Search do
  @moduledoc """
  Finding accounts from what an operator knows of them (`Overworld.Accounts`): a user id, the
  start of one, an email address, a device id or a custom id.

  `find/2` tries each in turn and answers the accounts found (at most `limit`), each at most
  once, exact matches first: the exact user id; the address (normalized as kept,
  `Overworld.Accounts.Email.normalize/1`), the device id and the custom id (each one key
  read); then, for 4 to 31 lowercase hex characters, the user ids starting with them (a scan
  of the users' table that stops at `limit` found: an operator's query, not a player's).
  """

  alias Overworld.Accounts

  @doc "The user ids of the accounts matching `text` (at most `limit`), exact matches first."
  @spec find(String.t(), pos_integer) :: [Accounts.user_id()]
  def find(text, limit) when is_binary(text) and is_integer(limit) and limit > 0 do
    exact =
      [user(text), email(text), Accounts.owner({:device, text}), Accounts.owner({:custom, text})]
      |> Enum.reject(&is_nil/1)

    (exact ++ prefixed(text, limit))
    |> Enum.uniq()
    |> Enum.take(limit)
  end

  defp user(text) do
    case Accounts.get_user(text) do
      {:ok, _} -> text
      _ -> nil
    end
  end

  defp email(text) do
    case Accounts.Email.normalize(text) do
      {:ok, a} -> Accounts.owner({:email, a})
      :error -> nil
    end
  end

  defp prefixed(text, limit) do
    if byte_size(text) in 4..31 and String.match?(text, ~r/\A[0-9a-f]+\z/),
      do: Accounts.user_ids_starting(text, limit),
      else: []
  end
end
