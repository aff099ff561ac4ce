defmodule Overworld.Protocol.Snapshot do
  @moduledoc """
  Snapshots: cell blocks, and the client-side view that applies them (docs/protocol.md,
  'Snapshots').

  An entry is `{id, template_index, values}`: an entity id, the index of its template in the
  handshake's template list, and its quantized values (`Overworld.Template.quantize/2`). A cell
  holds its entries sorted by id.

  A block is byte-aligned and self-contained (its cell key is absolute), so the block of a cell
  at a tick can be shared by every observer of that cell:

  * keyframe block: header varint `key * 4`, varint count, then bits: per entry the id gap from
    the previous entry (a bit varint: groups of 8 bits, a continuation bit then 7 value bits, low
    group first; the first gap is from 0), the template index (`ceil(log2(templates))` bits) and
    the template keyframe; zero bits to the byte boundary.
  * delta block, against the cell as the client holds it: header varint `key * 4 + 1` (no
    arrivals) or `key * 4 + 3` then varint arrivals, then bits: 2 bits per entry the client
    holds in the cell (`00` unchanged, `01` changed + template delta, `10` left the cell),
    then per arrival its id gap (from the previous arrival), template index and keyframe; zero
    bits to the byte boundary. (`key * 4 + 2` is invalid.)

  A snapshot: opcode `0x02`, varint tick, varint baseline, varint input ack, varint block
  count, the blocks, varint count and keys of the cells that left the view, varint count and
  runs (first key, cell count) of the cells held back (behind: the client keeps them at the
  tick it had), varint count of extensions and each (type, byte length, bytes). Blocks apply in
  order (several blocks of one cell follow each other); baseline 0 means the client drops
  everything first. A cell the client does not hold is empty: a delta block for it carries
  only arrivals, and a cell that leaves without being held is nothing to drop.
  """
  import Bitwise
  alias Overworld.Protocol.Codec
  alias Overworld.Template

  # Ids, keys and gaps stay below 2^53, so that a JavaScript number holds them exactly.
  @max_id (1 <<< 53) - 1

  @type entry :: {pos_integer, non_neg_integer, Template.values()}

  @doc "Bits of a template index for `count` templates."
  @spec index_bits(pos_integer) :: non_neg_integer
  def index_bits(1), do: 0
  def index_bits(count), do: Overworld.Template.Field.bits_for(count - 1)

  ## Encoding (server)

  @typedoc """
  How to encode records: the template index width and the keyframe and delta functions. Built
  by `encoder/1` from a list of templates (generic encoders) or a templates module (its
  compiled encoders, for the zone's hot path).
  """
  @type encoder ::
          {non_neg_integer, (non_neg_integer, tuple -> bitstring),
           (non_neg_integer, tuple, tuple -> bitstring | nil)}

  @doc "An encoder for a list of templates or a templates module."
  @spec encoder([Template.t()] | module | encoder) :: encoder
  def encoder({_tb, _kf, _d} = enc), do: enc

  def encoder(templates) when is_list(templates) do
    ts = List.to_tuple(templates)

    {index_bits(length(templates)), fn ti, q -> Template.encode_keyframe(elem(ts, ti), q) end,
     fn ti, a, b -> Template.encode_delta(elem(ts, ti), a, b) end}
  end

  def encoder(module) when is_atom(module) do
    {index_bits(length(module.__templates__())), &module.__keyframe__/2, &module.__delta__/3}
  end

  @doc "The keyframe block of a cell (templates: a list, a templates module or an encoder)."
  @spec keyframe_block(non_neg_integer, [entry], [Template.t()] | module | encoder) :: binary
  def keyframe_block(key, entries, templates) do
    {tb, kf, _} = encoder(templates)
    header = [Codec.varint(key * 4), Codec.varint(length(entries))]
    finish(header, keyframes(entries, 0, tb, kf, []))
  end

  # Fragments accumulate in reverse, and become one bitstring at the end (one allocation per
  # block instead of one append per record).
  defp keyframes([], _prev, _tb, _kf, acc), do: acc

  defp keyframes([{id, ti, q} | rest], prev, tb, kf, acc),
    do:
      keyframes(rest, id, tb, kf, [
        kf.(ti, q),
        <<vbits(id - prev)::bitstring, ti::size(tb)>> | acc
      ])

  defp finish(header, reversed) do
    bits = :erlang.list_to_bitstring(:lists.reverse(reversed))
    IO.iodata_to_binary([header | pad(bits)])
  end

  @doc "The delta block of a cell from `old` to `new` entries, or nil when nothing changed."
  @spec delta_block(non_neg_integer, [entry], [entry], [Template.t()] | module | encoder) ::
          binary | nil
  def delta_block(key, old, new, templates) do
    {tb, kf, delta} = encoder(templates)

    case ops(old, new, delta, [], [], false) do
      {_ops, [], false} ->
        nil

      {ops, arrivals, _changed} ->
        arrivals = :lists.reverse(arrivals)
        finish(delta_header(key, arrivals), keyframes(arrivals, 0, tb, kf, ops))
    end
  end

  @doc """
  A delta block from parts computed elsewhere (the zone's workers compute the ops of a cell in
  their simulation pass): the ops' bits and the arrivals sorted by id.
  """
  @spec delta_block_bits(non_neg_integer, bitstring, [entry], encoder) :: binary
  def delta_block_bits(key, ops, [], _enc), do: pad_block(Codec.varint(key * 4 + 1), ops)

  def delta_block_bits(key, ops, arrivals, {tb, kf, _}) do
    bits = :erlang.list_to_bitstring([ops | :lists.reverse(keyframes(arrivals, 0, tb, kf, []))])
    pad_block(IO.iodata_to_binary(delta_header(key, arrivals)), bits)
  end

  # Kind in the low two bits: 1 a delta without arrivals (no count), 3 with (count follows).
  defp delta_header(key, []), do: [Codec.varint(key * 4 + 1)]

  defp delta_header(key, arrivals),
    do: [Codec.varint(key * 4 + 3), Codec.varint(length(arrivals))]

  defp pad_block(head, bits) do
    pad = rem(8 - rem(bit_size(bits), 8), 8)
    <<head::binary, bits::bitstring, 0::size(pad)>>
  end

  # A merge of the two id-sorted lists; op fragments and arrivals accumulate in reverse;
  # `changed` says whether any op is not `00`.
  defp ops([], new, _delta, bits, arrivals, changed),
    do: {bits, :lists.reverse(new, arrivals), changed}

  defp ops([{id, _, _} | _] = old, [{nid, _, _} = n | new], delta, bits, arrivals, changed)
       when nid < id,
       do: ops(old, new, delta, bits, [n | arrivals], changed)

  defp ops([{id, ti, q0} | old], [{id, ti, q1} | new], delta, bits, arrivals, changed) do
    case delta.(ti, q0, q1) do
      nil -> ops(old, new, delta, [<<0::2>> | bits], arrivals, changed)
      d -> ops(old, new, delta, [d, <<1::2>> | bits], arrivals, true)
    end
  end

  # Same id, another template: it left and arrived.
  defp ops([{id, _, _} | old], [{id, _, _} = n | new], delta, bits, arrivals, _changed),
    do: ops(old, new, delta, [<<2::2>> | bits], [n | arrivals], true)

  defp ops([_ | old], new, delta, bits, arrivals, _changed),
    do: ops(old, new, delta, [<<2::2>> | bits], arrivals, true)

  defp vbits(n) when n < 128, do: <<0::1, n::7>>
  defp vbits(n), do: <<1::1, band(n, 127)::7, vbits(n >>> 7)::bitstring>>

  defp pad(bits) do
    case rem(bit_size(bits), 8) do
      0 -> bits
      r -> <<bits::bitstring, 0::size(8 - r)>>
    end
  end

  @doc """
  A snapshot message from blocks (iodata, shared binaries are not copied). `input_ack` is the
  newest input sequence number of the client that a tick applied (0: none); `behind` the runs
  `{first key, cell count}` of held cells whose blocks this snapshot holds back.
  """
  @spec encode(
          non_neg_integer,
          non_neg_integer,
          [iodata],
          [non_neg_integer],
          non_neg_integer,
          [{non_neg_integer, pos_integer}],
          [{non_neg_integer, binary}]
        ) :: iodata
  def encode(tick, baseline, blocks, left, input_ack \\ 0, behind \\ [], extensions \\ []) do
    [head(tick, baseline, input_ack, length(blocks)), blocks | tail(left, behind, extensions)]
  end

  @doc false
  # What comes before the blocks: the opcode, the tick, the baseline, the input
  # acknowledgement and the block count.
  @spec head(non_neg_integer, non_neg_integer, non_neg_integer, non_neg_integer) :: binary
  def head(tick, baseline, input_ack, count) do
    <<0x02, Codec.varint(tick)::binary, Codec.varint(baseline)::binary,
      Codec.varint(input_ack)::binary, Codec.varint(count)::binary>>
  end

  @doc false
  # What follows the blocks: the cells that left, the runs held back, the extensions
  # (docs/protocol.md). Most snapshots have none of them: three zero counts.
  @spec tail([non_neg_integer], [{non_neg_integer, pos_integer}], [{non_neg_integer, binary}]) ::
          iodata
  def tail(left, behind, extensions \\ [])
  def tail([], [], []), do: <<0, 0, 0>>

  def tail(left, behind, extensions) do
    [
      Codec.varint(length(left)),
      Enum.map(left, &Codec.varint/1),
      runs(behind),
      Overworld.Protocol.extensions(extensions)
    ]
  end

  @doc """
  Runs of cell keys `{first key, count}` (sorted by key, not overlapping) as the snapshot
  carries them: their count, then per run the gap from the end of the previous run (from key 0
  for the first) and the count, varints: a run of the view's next row is two bytes.

      iex> Overworld.Protocol.Snapshot.runs([{300, 4}, {318, 2}]) |> IO.iodata_to_binary()
      <<2, 172, 2, 4, 14, 2>>
  """
  @spec runs([{non_neg_integer, pos_integer}]) :: iodata
  def runs(runs) do
    {encoded, _} =
      Enum.map_reduce(runs, 0, fn {k, n}, next ->
        {[Codec.varint(k - next), Codec.varint(n)], k + n}
      end)

    [Codec.varint(length(runs)) | encoded]
  end

  @doc """
  SNAPSHOT extension 1, the send interval (ticks between two snapshots of this client), as a
  `{type, bytes}` for `tail/3`.

      iex> Overworld.Protocol.Snapshot.send_interval_extension(2)
      {1, <<2>>}
  """
  @spec send_interval_extension(pos_integer) :: {1, binary}
  def send_interval_extension(k) when is_integer(k) and k >= 1, do: {1, Codec.varint(k)}

  ## Decoding (client)

  defmodule View do
    @moduledoc """
    What a client holds: its cells (key => entries sorted by id), the tick each cell is at
    (`ticks`: the last snapshot that did not hold it back), the tick of the last snapshot, the
    newest input the server acknowledged, and the send interval the server announced (ticks
    between two snapshots; 1 until a snapshot's extension 1 says otherwise).

    In a world of zones (docs/protocol.md, "A world of zones"): `space`, the grid's key space
    `(cols + 2) * (rows + 2)` (keys at or past it are band keys), and `handed`, the entities a
    zone handed to another (op `11`) that no cell holds yet: id => `{template index, values,
    tick}`, shown until the id arrives in a cell, at most #{8} ticks.
    """
    defstruct cells: %{},
              ticks: %{},
              tick: 0,
              input_ack: 0,
              send_interval: 1,
              handed: %{},
              space: nil

    @type t :: %__MODULE__{
            cells: %{optional(non_neg_integer) => [Overworld.Protocol.Snapshot.entry()]},
            ticks: %{optional(non_neg_integer) => non_neg_integer},
            tick: non_neg_integer,
            input_ack: non_neg_integer,
            send_interval: pos_integer,
            handed: %{
              optional(pos_integer) => {non_neg_integer, tuple, non_neg_integer}
            },
            space: pos_integer | nil
          }

    @doc """
    An empty view of a grid of `cols` x `rows` cells (the HANDSHAKE's): its key space set,
    so band keys are told from region keys.

        iex> Overworld.Protocol.Snapshot.View.new(9, 9).space
        121
    """
    @spec new(non_neg_integer, non_neg_integer) :: t
    def new(cols, rows), do: %__MODULE__{space: (cols + 2) * (rows + 2)}

    @doc """
    Every entity the client holds: id => {template index, values}. A cell held back may still
    hold an entity that has since moved into a newer cell: the copy in the cell at the newest
    tick is the current one; of two copies at the same tick, the one in a region cell (a key
    below `space`) is (the other is a zone's band copy of an entity its neighbour just took).
    An entity handed to another zone that no cell holds yet is shown as it was.
    """
    @spec entities(t) :: %{optional(pos_integer) => {non_neg_integer, tuple}}
    def entities(%__MODULE__{cells: cells, ticks: ticks, handed: handed, space: space}) do
      base = Map.new(handed, fn {id, {ti, q, _}} -> {id, {ti, q}} end)

      cells
      |> Enum.sort_by(fn {k, _} -> {Map.get(ticks, k, 0), region?(k, space)} end)
      |> Enum.reduce(base, fn {_k, entries}, acc ->
        Enum.reduce(entries, acc, fn {id, ti, q}, acc -> Map.put(acc, id, {ti, q}) end)
      end)
    end

    defp region?(_k, nil), do: true
    defp region?(k, space), do: k < space
  end

  @doc """
  Applies a snapshot message to a view; answers the new view or an error (the client then asks
  for a resync). Blocks apply in order (several blocks of a cell: one after the other). A
  baseline of 0 starts from an empty view; any other baseline must be the view's tick
  (`{:error, :unknown_baseline}` otherwise). Never raises.
  """
  @spec apply(View.t(), binary, [Template.t()]) :: {:ok, View.t()} | {:error, term}
  def apply(%View{} = view, <<0x02, rest::binary>>, templates) do
    tb = index_bits(length(templates))
    ts = List.to_tuple(templates)

    with {:ok, tick, rest} <- Codec.read_varint(rest),
         {:ok, baseline, rest} <- Codec.read_varint(rest),
         {:ok, base, ticks} <- base(view, baseline),
         {:ok, ack, rest} <- Codec.read_varint(rest),
         {:ok, n, rest} <- Codec.read_varint(rest),
         {:ok, {cells, handed}, rest} <- blocks(n, rest, {base, []}, tb, ts),
         {:ok, left, rest} <- Codec.read_varint(rest),
         {:ok, cells, rest} <- leave(left, rest, cells),
         {:ok, behind, rest} <- read_runs(rest),
         {:ok, extensions, <<>>} <- Overworld.Protocol.read_extensions(rest),
         {:ok, interval} <- send_interval(extensions, view.send_interval) do
      {:ok,
       %View{
         view
         | cells: cells,
           ticks: cell_ticks(cells, ticks, behind, tick),
           tick: tick,
           input_ack: ack,
           send_interval: interval,
           handed: handed(if(baseline == 0, do: %{}, else: view.handed), handed, cells, tick)
       }}
    else
      {:ok, _, _} -> {:error, :trailing_bytes}
      error -> error
    end
  end

  def apply(%View{}, _bin, _templates), do: {:error, :not_a_snapshot}

  # Extension 1: the send interval (a varint of at least 1, the whole extension); other types
  # are skipped. Absent: unchanged.
  defp send_interval(extensions, current) do
    Enum.reduce_while(extensions, {:ok, current}, fn
      {1, bytes}, _ ->
        case Codec.read_varint(bytes) do
          {:ok, k, <<>>} when k >= 1 -> {:cont, {:ok, k}}
          _ -> {:halt, {:error, :bad_send_interval}}
        end

      _, acc ->
        {:cont, acc}
    end)
  end

  # Baseline 0: the client starts from nothing; otherwise it must hold the baseline.
  defp base(_view, 0), do: {:ok, %{}, %{}}
  defp base(%View{tick: tick, cells: cells, ticks: ticks}, tick), do: {:ok, cells, ticks}
  defp base(_view, _baseline), do: {:error, :unknown_baseline}

  # The runs of cells held back: `{first key, count}` (see runs/1).
  defp read_runs(bin) do
    with {:ok, n, rest} <- Codec.read_varint(bin), do: read_runs(n, rest, 0, [])
  end

  defp read_runs(0, rest, _next, acc), do: {:ok, acc, rest}

  defp read_runs(n, bin, next, acc) do
    with {:ok, gap, rest} <- Codec.read_varint(bin),
         {:ok, c, rest} <- Codec.read_varint(rest) do
      if c > 0 and c <= 65_536 and next + gap + c <= @max_id,
        do: read_runs(n - 1, rest, next + gap + c, [{next + gap, c} | acc]),
        else: {:error, :bad_run}
    end
  end

  # Every cell held is at this snapshot's tick but those held back, which keep theirs.
  defp cell_ticks(cells, ticks, behind, tick) do
    back =
      for {k, c} <- behind,
          key <- k..(k + c - 1)//1,
          is_map_key(cells, key),
          into: %{},
          do: {key, true}

    Map.new(cells, fn {k, _} ->
      {k, if(is_map_key(back, k), do: Map.get(ticks, k, 0), else: tick)}
    end)
  end

  # Handed entities (op 11) are kept, with the tick they were handed at, until a cell holds
  # their id or 8 ticks passed (their new zone dropped them before it published them).
  @handed_ticks 8

  defp handed(old, [], _cells, _tick) when map_size(old) == 0, do: old

  defp handed(old, new, cells, tick) do
    all = Enum.reduce(new, old, fn {id, ti, q}, acc -> Map.put(acc, id, {ti, q, tick}) end)
    held = for {_k, es} <- cells, {id, _, _} <- es, is_map_key(all, id), into: %{}, do: {id, true}

    :maps.filter(
      fn id, {_, _, t} -> t + @handed_ticks >= tick and not is_map_key(held, id) end,
      all
    )
  end

  defp blocks(0, rest, acc, _tb, _ts), do: {:ok, acc, rest}

  defp blocks(n, bin, {cells, handed}, tb, ts) do
    with {:ok, head, rest} <- Codec.read_varint(bin),
         {:ok, count, rest} <- block_count(head &&& 3, rest),
         {:ok, entries, out, rest} <-
           block(head &&& 1, Map.get(cells, head >>> 2, []), count, rest, tb, ts) do
      cells =
        if entries == [],
          do: Map.delete(cells, head >>> 2),
          else: Map.put(cells, head >>> 2, entries)

      blocks(n - 1, rest, {cells, out ++ handed}, tb, ts)
    end
  end

  # A keyframe (0) and a delta with arrivals (3) carry a count; a delta without (1) does not.
  defp block_count(1, rest), do: {:ok, 0, rest}
  defp block_count(2, _rest), do: {:error, :bad_block}
  defp block_count(_kind, rest), do: Codec.read_varint(rest)

  defp block(0, _old, count, bits, tb, ts) do
    with {:ok, entries, rest} <- read_keyframes(count, 0, bits, tb, ts, []),
         do: align(entries, [], bits, rest)
  end

  defp block(1, old, arrivals, bits, tb, ts) do
    with {:ok, kept, out, rest} <- read_ops(old, bits, ts, [], []),
         {:ok, new, rest} <- read_keyframes(arrivals, 0, rest, tb, ts, []),
         {:ok, entries} <- merge_sorted(kept, new),
         do: align(entries, out, bits, rest)
  end

  defp align(entries, out, bits, rest) do
    used = bit_size(bits) - bit_size(rest)

    case rem(used, 8) do
      0 ->
        {:ok, entries, out, rest}

      r ->
        case rest do
          <<_::size(8 - r), rest::binary>> -> {:ok, entries, out, rest}
          _ -> {:error, :truncated}
        end
    end
  end

  defp read_keyframes(0, _prev, bits, _tb, _ts, acc), do: {:ok, :lists.reverse(acc), bits}

  defp read_keyframes(n, prev, bits, tb, ts, acc) do
    with {:ok, gap, rest} <- read_vbits(bits, 0, 0),
         true <- (gap > 0 and prev + gap <= @max_id) || {:error, :bad_id},
         <<ti::size(tb), rest::bitstring>> <- rest,
         true <- ti < tuple_size(ts) || {:error, :bad_template_index},
         {:ok, q, rest} <- Template.decode_keyframe(elem(ts, ti), rest) do
      read_keyframes(n - 1, prev + gap, rest, tb, ts, [{prev + gap, ti, q} | acc])
    else
      {:error, _} = e -> e
      _ -> {:error, :truncated}
    end
  end

  defp read_vbits(_bits, _acc, shift) when shift > 49, do: {:error, :varint_too_long}

  defp read_vbits(<<0::1, v::7, rest::bitstring>>, acc, shift) do
    case acc + (v <<< shift) do
      v when v <= @max_id -> {:ok, v, rest}
      _ -> {:error, :varint_too_long}
    end
  end

  defp read_vbits(<<1::1, v::7, rest::bitstring>>, acc, shift),
    do: read_vbits(rest, acc + (v <<< shift), shift + 7)

  defp read_vbits(_bits, _acc, _shift), do: {:error, :truncated}

  # The entities that stay (in id order) and those handed to another zone (op 11).
  defp read_ops([], bits, _ts, acc, out), do: {:ok, :lists.reverse(acc), out, bits}

  defp read_ops([{id, ti, q} = e | old], bits, ts, acc, out) do
    case bits do
      <<0::2, rest::bitstring>> ->
        read_ops(old, rest, ts, [e | acc], out)

      <<1::2, rest::bitstring>> ->
        case Template.decode_delta(elem(ts, ti), q, rest) do
          {:ok, q2, rest} -> read_ops(old, rest, ts, [{id, ti, q2} | acc], out)
          error -> error
        end

      <<2::2, rest::bitstring>> ->
        read_ops(old, rest, ts, acc, out)

      <<3::2, rest::bitstring>> ->
        read_ops(old, rest, ts, acc, [e | out])

      _ ->
        {:error, :truncated}
    end
  end

  # The entities that stayed and those that arrived, by id; an arrival of an id the cell still
  # holds is invalid (an entity that changes template leaves with `10` and arrives again).
  defp merge_sorted(a, []), do: {:ok, a}
  defp merge_sorted([], b), do: {:ok, b}
  defp merge_sorted(a, b), do: merge(a, b, [])

  defp merge([{x, _, _} = e | a], [{y, _, _} | _] = b, acc) when x < y, do: merge(a, b, [e | acc])
  defp merge([{x, _, _} | _] = a, [{y, _, _} = e | b], acc) when y < x, do: merge(a, b, [e | acc])
  defp merge([], b, acc), do: {:ok, :lists.reverse(acc, b)}
  defp merge(a, [], acc), do: {:ok, :lists.reverse(acc, a)}
  defp merge(_a, _b, _acc), do: {:error, :bad_id}

  defp leave(0, rest, cells), do: {:ok, cells, rest}

  defp leave(n, bin, cells) do
    with {:ok, key, rest} <- Codec.read_varint(bin),
         do: leave(n - 1, rest, Map.delete(cells, key))
  end
end
