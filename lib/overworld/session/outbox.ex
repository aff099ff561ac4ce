defmodule Overworld.Session.Outbox do
  @moduledoc false
  # A session's reliable messages for its client (EVENT), as a value the session holds:
  # numbered on the connection (`reliable_seq` 1, 2, ...), sent in order, and those a busy
  # socket refused kept for the next try. While the connection is lost (the player kept for
  # its grace period) they are kept for a reconnect, at most `max/0` of them (the oldest go),
  # and a new connection of the player takes them over (`drain/1`).

  @max 1_024

  defstruct seq: 0, queue: :queue.new(), size: 0, bytes: 0, dropping: false

  @type t :: %__MODULE__{
          seq: non_neg_integer,
          queue: :queue.queue({pos_integer, binary}),
          size: non_neg_integer,
          bytes: non_neg_integer,
          dropping: boolean
        }

  @doc "An empty outbox, numbering from 1."
  @spec new() :: t
  def new, do: %__MODULE__{}

  @doc "The most messages kept for a reconnect (and waiting for a busy socket)."
  @spec max() :: pos_integer
  def max, do: @max

  @doc "Messages waiting."
  @spec size(t) :: non_neg_integer
  def size(%__MODULE__{size: n}), do: n

  @doc "Bytes of the messages waiting."
  @spec bytes(t) :: non_neg_integer
  def bytes(%__MODULE__{bytes: n}), do: n

  @doc "A message for the client, numbered on this connection (the next `reliable_seq`)."
  @spec enqueue(t, binary) :: t
  def enqueue(%__MODULE__{} = o, payload) do
    seq = o.seq + 1

    %{
      o
      | seq: seq,
        queue: :queue.in({seq, payload}, o.queue),
        size: o.size + 1,
        bytes: o.bytes + byte_size(payload)
    }
  end

  @doc """
  A message kept for a reconnect: enqueued, and past `max/0` the oldest goes. Answers the
  outbox and `:dropping` the first time one goes (the caller says so once), else `:ok`.

      iex> alias Overworld.Session.Outbox
      iex> o = Enum.reduce(1..1_024, Outbox.new(), fn i, o -> elem(Outbox.keep(o, <<i::16>>), 0) end)
      iex> {o, :dropping} = Outbox.keep(o, "new")
      iex> {o, :ok} = Outbox.keep(o, "newer")
      iex> {payloads, _} = Outbox.drain(o)
      iex> {length(payloads), hd(payloads), List.last(payloads)}
      {1024, <<3::16>>, "newer"}
  """
  @spec keep(t, binary) :: {t, :ok | :dropping}
  def keep(o, payload) do
    o = enqueue(o, payload)

    if o.size <= @max do
      {o, :ok}
    else
      {{:value, {_, dropped}}, rest} = :queue.out(o.queue)
      o = %{o | queue: rest, size: o.size - 1, bytes: o.bytes - byte_size(dropped)}
      if o.dropping, do: {o, :ok}, else: {%{o | dropping: true}, :dropping}
    end
  end

  @doc """
  Sends the messages in order while `send.(seq, payload)` accepts them (true; a busy socket
  answers false): the rest wait, in order.

      iex> alias Overworld.Session.Outbox
      iex> o = Outbox.new() |> Outbox.enqueue("a") |> Outbox.enqueue("b")
      iex> o = Outbox.flush(o, fn seq, _payload -> seq == 1 end)
      iex> {Outbox.size(o), Outbox.drain(o) |> elem(0)}
      {1, ["b"]}
  """
  @spec flush(t, (pos_integer, binary -> boolean)) :: t
  def flush(%__MODULE__{size: 0} = o, _send), do: o

  def flush(o, send) do
    {{:value, {seq, payload}}, rest} = :queue.out(o.queue)

    if send.(seq, payload),
      do: flush(%{o | queue: rest, size: o.size - 1, bytes: o.bytes - byte_size(payload)}, send),
      else: o
  end

  @doc """
  Every message waiting, oldest first (their payloads: a new connection numbers them again),
  and the outbox emptied.
  """
  @spec drain(t) :: {[binary], t}
  def drain(o) do
    payloads = for {_seq, p} <- :queue.to_list(o.queue), do: p
    {payloads, %{o | queue: :queue.new(), size: 0, bytes: 0}}
  end
end
