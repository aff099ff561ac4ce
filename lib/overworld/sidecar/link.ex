defmodule Overworld.Sidecar.Link do
  @moduledoc false
  # A bucket worker's connection to its zone's sidecar (docs/sidecar.md, "The zone's
  # protocol"): its own Unix socket, length-prefixed frames (`packet: 4`), one request per tick
  # (its stripe's bodies) and one answer. Everything here runs in the worker; a failure of any
  # kind (the sidecar gone: end of file at once; late past the deadline; garbled; wrong tick)
  # closes the connection and is reported (`Overworld.Sidecar.failed/3`), and the worker
  # computes that tick's physics in Elixir.
  #
  # With `transport: :shm` the records go through the zone's shared segment (our stripe's
  # request and answer regions, under their sequence locks: Overworld.Sidecar.Shm) and the
  # frames only announce them; a request whose records do not fit our region goes in its
  # frame, and so does an answer that does not fit (docs/sidecar.md).

  require Overworld.Entity
  import Overworld.Entity, only: [entity: 1]

  alias Overworld.Sidecar
  alias Overworld.Sidecar.Shm
  alias Overworld.Zone.{Paths, Physics}

  defstruct generation: 0, socket: nil, pending: nil, shm: nil, seq: 0

  @type t :: %__MODULE__{
          generation: non_neg_integer,
          socket: :gen_tcp.socket() | nil,
          # {tick, n, bodies, computed}: the request sent for the state of `tick` (`n` bodies:
          # `bodies`; when their records went through the segment, `:entities` if they were
          # written from the entities where they are, nil if from a list of bodies; the path
          # requests `computed`), waiting for its answer.
          pending:
            nil
            | {non_neg_integer, non_neg_integer, nil | :entities | [Overworld.Physics.body()],
               [Paths.request()]},
          # transport :shm: the segment and our regions {request, request_bytes, answer,
          # answer_bytes}; `seq`: our request region's last even seq.
          shm: nil | {Shm.t(), tuple},
          seq: non_neg_integer
        }

  # A frame is at most 64 MiB (docs/sidecar.md).
  @max_frame 64 * 1024 * 1024
  @connect_ms 200

  @doc false
  # Sends the bodies among the entities of `pairs` (our cells as the state of tick `tick` left
  # them, in order) and the path requests `computed` to the sidecar of `generation`,
  # connecting first if the link is not to that generation. Answers the link (with the
  # request pending, or without it when sending failed: reported).
  @spec request(
          t,
          Physics.t(),
          non_neg_integer,
          non_neg_integer,
          non_neg_integer,
          list,
          [Paths.request()]
        ) :: t
  def request(link, p, stripe, generation, tick, pairs, computed \\ [])
  def request(link, _p, _stripe, 0, _tick, _pairs, _computed), do: close(link)

  def request(link, p, stripe, generation, tick, pairs, computed) do
    sending = System.monotonic_time(:microsecond)

    with {:ok, link} <- connect(link, p, stripe, generation),
         {:ok, link} <- send_request(link, p, tick, pairs, computed) do
      link
    else
      {:error, reason} ->
        Sidecar.failed(p, generation, {:send, reason}, sending)
        close(link)
    end
  end

  # Over the segment, the records (the bodies', then the path queries') go in our request
  # region and the frame announces them (`"OWSQ" tick n q seq`); the bodies' written from the
  # entities where they are when every entity is a body of the zone's radius and mass (no
  # `body/1`), from the bodies otherwise. Over the socket, or when they do not fit the region,
  # the records go in the frame.
  defp send_request(%{shm: {shm, {region, len, _, _}}, seq: seq} = link, p, tick, pairs, computed) do
    {queries, q} = {Paths.queries(computed), length(computed)}

    case publish(shm, region, len, seq, tick, pairs, p, queries) do
      {:ok, n, written} ->
        frame = <<"OWSQ", tick::little-64, n::little-64, q::little-64, seq + 2::little-64>>
        sent(%{link | seq: seq + 2, pending: {tick, n, written, computed}}, frame)

      {:frame, bodies} ->
        send_frame(link, tick, bodies, computed, queries, q)

      {:error, reason} ->
        {:error, {:shm, reason}}
    end
  end

  defp send_request(link, p, tick, pairs, computed) do
    bodies = Physics.bodies(pairs, p)
    send_frame(link, tick, bodies, computed, Paths.queries(computed), length(computed))
  end

  # Our records and `queries` in our request region: `{:ok, n, :entities | nil}` (written from
  # the entities or from a list of bodies), `{:frame, bodies}` when they do not fit.
  defp publish(shm, region, len, seq, tick, pairs, %Physics{body: nil} = p, queries) do
    case Shm.publish_entities(shm, region, len, seq, tick, pairs, spec(p), queries) do
      {:ok, n} -> {:ok, n, :entities}
      {:error, :bounds} -> {:frame, Physics.bodies(pairs, p)}
      other -> other
    end
  end

  defp publish(shm, region, len, seq, tick, pairs, p, queries) do
    bodies = Physics.bodies(pairs, p)

    case Shm.publish_bodies(shm, region, len, seq, tick, bodies, queries) do
      {:ok, n} -> {:ok, n, nil}
      {:error, :bounds} -> {:frame, bodies}
      other -> other
    end
  end

  # `queries`: the records of the path requests `computed` (`q` of them).
  defp send_frame(link, tick, bodies, computed, queries, q) do
    n = length(bodies)
    frame = Physics.request(tick, bodies, n, queries, q)
    sent(%{link | pending: {tick, n, bodies, computed}}, frame)
  end

  defp sent(link, frame) do
    case :gen_tcp.send(link.socket, frame) do
      :ok -> {:ok, link}
      error -> error
    end
  end

  # An entity's id and position (0-based tuple positions: Overworld.Sidecar.Shm.consume_moved/9).
  @position {entity(:id), entity(:x), entity(:y)}

  # The entity's fields (0-based tuple positions) and the zone's body
  # (Overworld.Sidecar.Shm.publish_entities/8).
  defp spec(p) do
    {entity(:id), entity(:x), entity(:y), entity(:vx), entity(:vy), p.radius, p.mass, p.max_speed}
  end

  @doc false
  # The answer to the pending request for the state of tick `tick`: `{:ok, results, paths}`
  # (the results in the order of the bodies sent; the paths computed, by id), `:none`
  # (nothing pending for that tick) or `{:error, reason}` (reported; the link is closed).
  # `cells` answers the cells whose entities were sent (see decode/3).
  @spec await(t, Physics.t(), non_neg_integer, (() -> list)) ::
          {{:ok, [Physics.result()], %{optional(pos_integer) => Paths.answer()}}
           | :none
           | {:error, term}, t}
  def await(%{pending: {tick, _, _, _}, socket: socket} = link, p, tick, cells)
      when socket != nil do
    waiting = System.monotonic_time(:microsecond)
    deadline = div(waiting, 1000) + p.sidecar.deadline_ms

    case receive_answer(link, deadline, cells) do
      {:ok, _results, _paths} = ok -> {ok, %{link | pending: nil}}
      {:error, reason} -> fail(link, p, reason, waiting)
    end
  end

  def await(link, _p, _tick, _cells), do: {:none, %{link | pending: nil}}

  # An answer to an older request (one dropped by a load step, `:stale`): the next.
  defp receive_answer(link, deadline, cells) do
    with {:ok, frame} <- receive_frame(link, deadline),
         :stale <- decode(link, frame, cells),
         do: receive_answer(link, deadline, cells)
  end

  @doc false
  # The next frame from the sidecar, waiting at most until `deadline` (monotonic ms).
  @spec receive_frame(t, integer) :: {:ok, binary} | {:error, term}
  def receive_frame(%{socket: socket}, deadline) do
    case :gen_tcp.recv(socket, 0, max(deadline - System.monotonic_time(:millisecond), 0)) do
      {:ok, frame} -> {:ok, frame}
      {:error, :timeout} -> {:error, :late}
      {:error, reason} -> {:error, reason}
    end
  end

  @doc false
  # An answer frame to the pending request: its results, checked to be those of the bodies
  # sent, and its paths, checked to be those asked for. When the frame announces the results
  # in our answer region (`"OWSR" tick n q seq bytes`), they are read from there, the path
  # answers after them: merged into the entities of `cells.()` (the cells whose entities were
  # written into our request region: their ids are checked in order; the results are the
  # entities moved), or, when the records were written from a list of bodies, as `{id, x, y}`
  # (their ids checked against our request region).
  @spec decode(t, binary, (() -> list)) ::
          {:ok, [Physics.result()], %{optional(pos_integer) => Paths.answer()}}
          | {:error, term}
          | :stale
  def decode(
        %{shm: {shm, {request, _, region, len}}, pending: {tick, n, written, computed}},
        <<"OWSR", t::little-64, n::little-64, q::little-64, seq::little-64, _bytes::little-64>>,
        cells
      )
      when t == tick and is_atom(written) do
    with true <- q == length(computed) || :error,
         {:ok, results, bin} <-
           consume(shm, region, len, seq, tick, n, q, written, request, cells),
         {:ok, paths} <- Paths.decode(bin, {computed, %{}}) do
      {:ok, results, paths}
    else
      :error -> {:error, :wrong_paths}
      {:error, :ids} -> {:error, :wrong_ids}
      {:error, reason} -> {:error, {:shm, reason}}
    end
  end

  def decode(%{pending: {tick, n, bodies, computed}} = link, frame, _cells) do
    with {:ok, results, paths} <- Physics.answer(frame, tick, n, length(computed)),
         {:ids, true} <- {:ids, same_ids?(link, results, bodies)},
         {:ok, paths} <- Paths.decode(paths, {computed, %{}}) do
      {:ok, results, paths}
    else
      {:ids, false} -> {:error, :wrong_ids}
      :error -> {:error, :wrong_paths}
      other -> other
    end
  end

  # Our answer region read, with the answers to our `q` path queries (as bytes): into the
  # entities of `cells.()`, or as results.
  defp consume(shm, region, len, seq, tick, n, q, :entities, _request, cells),
    do: Shm.consume_moved(shm, region, len, seq, tick, n, cells.(), @position, q)

  defp consume(shm, region, len, seq, tick, n, q, nil, request, _cells),
    do: Shm.consume_results(shm, region, len, seq, tick, n, request, q)

  defp same_ids?(_link, results, bodies) when is_list(bodies),
    do: Physics.same_ids?(results, bodies)

  # An answer in its frame to a request whose records were in our region (an answer larger
  # than the answer region): the ids of the records we wrote there.
  defp same_ids?(%{shm: {shm, {request, _, _, _}}}, results, _written) do
    case Shm.read(shm, request + 64, 64 * length(results)) do
      {:ok, records} ->
        ids = for <<id::little-64, _::binary-size(56) <- records>>, do: id
        Enum.map(results, &elem(&1, 0)) == ids

      {:error, _} ->
        false
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

    with {:ok, shm} <- segment(p, stripe, generation) do
      case :gen_tcp.connect({:local, p.socket}, 0, socket_opts(), @connect_ms) do
        {:ok, socket} ->
          transport = if shm, do: 1, else: 0

          with :ok <- :gen_tcp.send(socket, Physics.hello(p, stripe, transport)),
               {:ok, <<"OWSA", 1::little-64>>} <- :gen_tcp.recv(socket, 0, @connect_ms),
               {:ok, seq} <- request_seq(shm) do
            {:ok, %__MODULE__{generation: generation, socket: socket, shm: shm, seq: seq}}
          else
            other ->
              :gen_tcp.close(socket)
              {:error, {:hello, other}}
          end

        {:error, reason} ->
          {:error, {:connect, reason}}
      end
    end
  end

  # transport :shm: the segment of that generation's sidecar and our stripe's regions.
  defp segment(%Physics{transport: :shm} = p, stripe, generation) do
    case Sidecar.segment(p, generation) do
      {:ok, shm, l} ->
        request = 64 + stripe * (l.request + l.answer)
        {:ok, {shm, {request, l.request, request + l.request, l.answer}}}

      {:error, reason} ->
        {:error, reason}
    end
  end

  defp segment(_p, _stripe, _generation), do: {:ok, nil}

  # Our request region's seq as we find it (0 in a new segment).
  defp request_seq(nil), do: {:ok, 0}

  defp request_seq({shm, {region, _, _, _}}) do
    case Shm.read(shm, region, 8) do
      {:ok, <<seq::little-64>>} when rem(seq, 2) == 0 -> {:ok, seq}
      {:ok, <<seq::little-64>>} -> {:error, {:odd_seq, seq}}
      {:error, reason} -> {:error, {:shm, reason}}
    end
  end

  defp socket_opts,
    do: [:binary, :local, active: false, packet: 4, packet_size: @max_frame]
end
