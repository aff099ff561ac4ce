defmodule Overworld.Sidecar.Link do
  @moduledoc false
  # A bucket worker's connection to its zone's sidecar (docs/sidecar.md, "The zone's
  # protocol"): its own Unix socket, length-prefixed frames (`packet: 4`), one request per tick
  # (its stripe's bodies) and one answer. Everything here runs in the worker; a failure of any
  # kind (the sidecar gone: end of file at once; late past the deadline; garbled; wrong tick)
  # closes the connection and is reported (`Overworld.Sidecar.failed/3`), and the worker
  # computes that tick's physics in Elixir.

  alias Overworld.Sidecar
  alias Overworld.Zone.Physics

  defstruct generation: 0, socket: nil, pending: nil

  @type t :: %__MODULE__{
          generation: non_neg_integer,
          socket: :gen_tcp.socket() | nil,
          # {tick, bodies}: the request sent for the state of `tick`, waiting for its answer.
          pending: nil | {non_neg_integer, [Overworld.Physics.body()]}
        }

  # A frame is at most 64 MiB (docs/sidecar.md).
  @max_frame 64 * 1024 * 1024
  @connect_ms 200

  @doc false
  # Sends the bodies of the state of tick `tick` to the sidecar of `generation`, connecting
  # first if the link is not to that generation. Answers the link (with the request pending,
  # or without it when sending failed: reported).
  @spec request(t, Physics.t(), non_neg_integer, non_neg_integer, non_neg_integer, list) :: t
  def request(link, _p, _stripe, 0, _tick, _bodies), do: close(link)

  def request(link, p, stripe, generation, tick, bodies) do
    sending = System.monotonic_time(:microsecond)

    with {:ok, link} <- connect(link, p, stripe, generation),
         :ok <- :gen_tcp.send(link.socket, Physics.request(tick, bodies, length(bodies))) do
      %{link | pending: {tick, bodies}}
    else
      {:error, reason} ->
        Sidecar.failed(p, generation, {:send, reason}, sending)
        close(link)
    end
  end

  @doc false
  # The answer to the pending request for the state of tick `tick`: `{:ok, results}` (in the
  # order of the bodies sent), `:none` (nothing pending for that tick) or `{:error, reason}`
  # (reported; the link is closed).
  @spec await(t, Physics.t(), non_neg_integer) ::
          {{:ok, [Physics.result()]} | :none | {:error, term}, t}
  def await(%{pending: {tick, bodies}, socket: socket} = link, p, tick) when socket != nil do
    waiting = System.monotonic_time(:microsecond)
    deadline = div(waiting, 1000) + p.sidecar.deadline_ms

    case receive_answer(socket, tick, length(bodies), deadline) do
      {:ok, results} = ok ->
        if Physics.same_ids?(results, bodies),
          do: {ok, %{link | pending: nil}},
          else: fail(link, p, :wrong_ids, waiting)

      {:error, reason} ->
        fail(link, p, reason, waiting)
    end
  end

  def await(link, _p, _tick), do: {:none, %{link | pending: nil}}

  defp receive_answer(socket, tick, n, deadline) do
    wait = max(deadline - System.monotonic_time(:millisecond), 0)

    case :gen_tcp.recv(socket, 0, wait) do
      {:ok, frame} ->
        case Physics.answer(frame, tick, n) do
          # An answer to an older request (one dropped by a load step): the next.
          :stale -> receive_answer(socket, tick, n, deadline)
          other -> other
        end

      {:error, :timeout} ->
        {:error, :late}

      {:error, reason} ->
        {:error, reason}
    end
  end

  defp fail(link, p, reason, waiting) do
    Sidecar.failed(p, link.generation, reason, waiting)
    {{:error, reason}, close(link)}
  end

  @doc false
  # Forgets the pending request (a load step: the next tick's physics is computed in Elixir).
  @spec drop(t) :: t
  def drop(link), do: %{link | pending: nil}

  @doc false
  @spec close(t) :: t
  def close(%{socket: nil} = link), do: %{link | pending: nil, generation: 0}

  def close(link) do
    :gen_tcp.close(link.socket)
    %__MODULE__{}
  end

  @doc false
  # The link to the sidecar of `generation` for worker `stripe`: this one if it is already
  # to it, else a new connection (hello answered).
  @spec connect(t, Physics.t(), non_neg_integer, pos_integer) :: {:ok, t} | {:error, term}
  def connect(%{generation: g, socket: s} = link, _p, _stripe, g) when s != nil, do: {:ok, link}

  def connect(link, p, stripe, generation) do
    _ = close(link)
    # (Transport 0: the records in the frames; the shared segment is not wired in yet.)

    case :gen_tcp.connect({:local, p.socket}, 0, socket_opts(), @connect_ms) do
      {:ok, socket} ->
        with :ok <- :gen_tcp.send(socket, Physics.hello(p, stripe, 0)),
             {:ok, <<"OWSA", 1::little-64>>} <- :gen_tcp.recv(socket, 0, @connect_ms) do
          {:ok, %__MODULE__{generation: generation, socket: socket}}
        else
          other ->
            :gen_tcp.close(socket)
            {:error, {:hello, other}}
        end

      {:error, reason} ->
        {:error, {:connect, reason}}
    end
  end

  defp socket_opts,
    do: [:binary, :local, active: false, packet: 4, packet_size: @max_frame]
end
