defmodule Overworld.Accounts.LastSeen do
  @moduledoc """
  When each account was last seen: its last login, token refresh or WebSocket connection, to
  the minute.

  A Mnesia table replicated like the accounts (`:overworld_last_seen`, `{user_id, unix
  seconds}`). `touch/1` costs a dirty read, and a dirty write at most once a minute per
  account (never on every request); it is not fsynced (a crash may forget the last minute).
  """

  alias Overworld.Accounts

  @table :overworld_last_seen
  @every 60

  @doc false
  # Makes sure the table exists (`Overworld.Server` calls it once the accounts run).
  @spec start() :: :ok | {:error, term}
  def start, do: Accounts.ensure_table(@table, [:user_id, :at], [])

  @doc "Notes that `user_id` is seen now (written when its last note is a minute old or more)."
  @spec touch(binary) :: :ok
  def touch(user_id) when is_binary(user_id) do
    now = System.system_time(:second)

    case :mnesia.dirty_read(@table, user_id) do
      [{@table, _, at}] when now - at < @every -> :ok
      _ -> :mnesia.dirty_write({@table, user_id, now})
    end
  catch
    # (A note is worth no failure of what the user does.)
    :exit, _ -> :ok
  end

  @doc "When `user_id` was last seen (unix seconds), or nil."
  @spec get(binary) :: integer | nil
  def get(user_id) do
    case :mnesia.dirty_read(@table, user_id) do
      [{@table, _, at}] -> at
      [] -> nil
    end
  catch
    :exit, _ -> nil
  end
end
