defmodule Overworld.Sidecar.Shm do
  @moduledoc """
  The zone's side of the sidecar's shared segment (docs/sidecar.md, "The shared segment
  (`transport` 1)"): a file in `/dev/shm` that the zone creates, sizes and writes the header
  of, mapped by the zone and by the sidecar, through which they exchange each tick's records.
  Each region of the segment is written under a **sequence lock**: the writer stores `seq + 1`
  (odd: writing) in the region's first word, then the region's other header words and its
  records, then `seq + 2` (even: done); the reader copies the region out between two loads of
  `seq` and keeps the copy only when both are the `seq` the writer announced.

  A small C NIF (`c_src/overworld_shm.c`, built into `priv/native/overworld_shm.so` by the
  `overworld_native` Mix compiler) maps the file and makes the copies. It runs inside the node
  and never crashes it: every argument is checked (`ArgumentError` for a term of the wrong
  kind; `{:error, :bounds}` for an offset or length outside the mapping, whatever the integer),
  nothing is written when an argument is bad, every copy is bounds-checked, and a file the
  other process truncated or grew is reported as `{:error, :resized}` (the file's size is
  checked before each call, and a copy that touches a page the truncation removed, which
  raises SIGBUS, is caught by the library's SIGBUS handler and ends the call the same way).

  The library is loaded on demand by `load/0` (not when this module loads, so that the module
  is there on a machine without a C compiler): until then every function raises
  `:nif_not_loaded` (an `ErlangError`).

  Numbers in the segment are little-endian 64-bit integers. A region starts with the 64-byte
  header `seq tick n q bytes 0 0 0`; its records follow at its offset + 64. Region offsets are
  multiples of 64 (so is the mapping's start: `seq` is an aligned word).

  Errors, besides those of `create/2` (a POSIX error as an atom, `:enoent`, `:eacces`, …):

    * `:bounds` — an offset, length or count outside the mapping or the region, or a region
      offset not a multiple of 64;
    * `:resized` — the file's size is no longer the mapped size (the sidecar truncated or grew
      it: the segment is unusable);
    * `:fault` — a copy raised SIGBUS, yet the file has the mapped size when checked right
      after (the kernel could not give a page, `/dev/shm` full; or the file was truncated and
      restored during the copy);
    * `:closed` — `close/1` was called on the segment;
    * `:torn` — a region being written (odd `seq`) or rewritten during the copy;
    * `:seq` — a region whose `seq` is not the expected one.
  """

  @typedoc "A mapped segment (a NIF resource: unmapped and closed when garbage-collected)."
  @type t :: reference()

  @typedoc "Why a call on a segment failed (see the module's documentation)."
  @type error :: :bounds | :resized | :fault | :closed

  @typedoc "An offset or a length in the segment, in bytes (a sequence number for `seq`)."
  @type offset :: non_neg_integer()

  @typedoc "A worker's cells: `[{key, [entity]}]`, the entities tuples."
  @type cells :: [{term(), [tuple()]}]

  @typedoc "Where an entity's fields are and the zone's body (`publish_entities/7`)."
  @type entity_spec ::
          {0..255, 0..255, 0..255, 0..255, 0..255, non_neg_integer(), non_neg_integer(),
           non_neg_integer()}

  @typedoc "The 0-based positions of an entity's id, x and y in its tuple (`consume_moved/8`)."
  @type positions :: {0..255, 0..255, 0..255}

  @typedoc "Why reading an answer region failed (`consume_results/6` and the others)."
  @type answer_error ::
          error()
          | :torn
          | :seq
          | :ids
          | {:tick | :bytes, integer()}
          | {:count | :queries, non_neg_integer()}

  @typedoc "A body record: `{id, x, y, vx, vy, r, m}`, signed 64-bit integers."
  @type body ::
          {integer(), integer(), integer(), integer(), integer(), integer(), integer()}

  @doc """
  Loads the NIF library from the application's `priv/native/overworld_shm.so`; `:ok` also
  when it is already loaded.

  `{:error, reason}` when the library is missing (no C compiler at build time) or does not
  load; the functions of this module then raise `:nif_not_loaded`.
  """
  @spec load() :: :ok | {:error, term()}
  def load do
    path = Application.app_dir(:overworld, "priv/native/overworld_shm")

    case :erlang.load_nif(String.to_charlist(path), 0) do
      :ok -> :ok
      {:error, {:reload, _}} -> :ok
      {:error, {reason, text}} -> {:error, {reason, List.to_string(text)}}
    end
  rescue
    # The application is not on the code path.
    e in ArgumentError -> {:error, {:no_app, Exception.message(e)}}
  end

  @doc """
  Creates (or truncates) the file at `path` with mode 0600, sizes it to `size` bytes (a
  multiple of 64, at most 1 GiB) and maps it shared; its bytes are zeros.

  The file is opened with `O_NOFOLLOW` (a symbolic link at `path` is refused: `:eloop`) and is
  never removed by this module. `{:error, :size}` for a size that is not allowed; a POSIX error
  (`:enoent`, `:eacces`, …) when the file cannot be opened, sized or mapped.
  """
  @spec create(String.t(), pos_integer()) :: {:ok, t()} | {:error, term()}
  def create(_path, _size), do: :erlang.nif_error(:nif_not_loaded)

  @doc """
  Unmaps the segment and closes its file now (later calls on it answer `{:error, :closed}`);
  waits for copies in flight on other schedulers. `:ok` also when already closed.
  """
  @spec close(t()) :: :ok
  def close(_shm), do: :erlang.nif_error(:nif_not_loaded)

  @doc """
  The mapped size and the file's current size (they differ once the file was resized).
  """
  @spec size(t()) :: {:ok, non_neg_integer(), non_neg_integer()} | {:error, :closed | atom()}
  def size(_shm), do: :erlang.nif_error(:nif_not_loaded)

  @doc """
  Copies `data` into the segment at `offset` (no sequence lock: for the file's header).
  """
  @spec write(t(), non_neg_integer(), iodata()) :: :ok | {:error, error()}
  def write(_shm, _offset, _data), do: :erlang.nif_error(:nif_not_loaded)

  @doc """
  Copies `len` bytes out of the segment from `offset` (no sequence lock).
  """
  @spec read(t(), non_neg_integer(), non_neg_integer()) :: {:ok, binary()} | {:error, error()}
  def read(_shm, _offset, _len), do: :erlang.nif_error(:nif_not_loaded)

  @doc """
  For the tests only: `read/3` without the check of the file's size, so that a copy from a
  truncated file does fault and the SIGBUS handler has to turn it into `{:error, :resized}`.
  """
  @spec __read_unchecked__(t(), non_neg_integer(), non_neg_integer()) ::
          {:ok, binary()} | {:error, error()}
  def __read_unchecked__(_shm, _offset, _len), do: :erlang.nif_error(:nif_not_loaded)

  @doc """
  Writes one region under its sequence lock: `seq + 1` in its first word (release), a release
  fence, `header` (the region header's other words, at most 56 bytes, zero-padded to 56) at
  `region + 8` and `records` at `region + 64`, a release fence, then `seq + 2` (release).

  `seq` is the region's current (even) value; the region's new one is `seq + 2`. The region's
  first word must hold `seq` (`{:error, :seq}` otherwise, nothing written). `region` is a
  multiple of 64 and the records must fit in the mapping (`{:error, :bounds}`). A header
  longer than 56 bytes, an odd or negative `seq`, or `header`/`records` not iodata: badarg.
  """
  @spec publish(t(), non_neg_integer(), non_neg_integer(), iodata(), iodata()) ::
          :ok | {:error, error() | :seq}
  def publish(_shm, _region, _seq, _header, _records), do: :erlang.nif_error(:nif_not_loaded)

  @doc """
  `publish/5` of a request region holding `bodies` and no path query, its records built in C:
  the region header `seq tick n 0 64·n 0 0 0` and, per body `{id, x, y, vx, vy, r, m}`, the
  64-byte record `id x y vx vy r m 0`, in the list's order. Answers `{:ok, n}`; the region's
  new `seq` is `seq + 2`.

  The region is `[region, region + region_len)`: `64 + 64·n` bytes must fit in it, and it in
  the mapping (`{:error, :bounds}`). Every body is checked before anything is written: a body
  that is not a 7-tuple of signed 64-bit integers, or `bodies` not a proper list, is badarg.
  """
  @spec publish_bodies(t(), offset(), offset(), offset(), integer(), [body()]) ::
          {:ok, non_neg_integer()} | {:error, error() | :seq}
  def publish_bodies(_shm, _region, _region_len, _seq, _tick, _bodies),
    do: :erlang.nif_error(:nif_not_loaded)

  @doc """
  `publish_bodies/6` with path queries: `queries` is their records (64 bytes each, as the
  sidecar's request frame carries them: `tag fx fy tx ty 0 0 0`), written as they are after
  the body records; the header is `seq tick n q 64·(n + q) 0 0 0`. A `queries` that is not a
  binary of whole records is badarg; `64 + 64·(n + q)` bytes must fit in the region.
  """
  @spec publish_bodies(t(), offset(), offset(), offset(), integer(), [body()], binary()) ::
          {:ok, non_neg_integer()} | {:error, error() | :seq}
  def publish_bodies(_shm, _region, _region_len, _seq, _tick, _bodies, _queries),
    do: :erlang.nif_error(:nif_not_loaded)

  @doc """
  `publish_bodies/6` of the entities of `cells` read where they are, without a list of body
  tuples: `cells` is `[{key, [entity]}]` (a bucket worker's cells, in order); every entity is
  a tuple whose elements at the 0-based positions `id_i`, `x_i`, `y_i`, `vx_i`, `vy_i` are its
  id, position and velocity, and a body of radius `r` and mass `m`, its velocity limited to
  `[-max_speed, max_speed]` per axis. `spec` is `{id_i, x_i, y_i, vx_i, vy_i, r, m, max_speed}`.

  Answers `{:ok, n}` (the entities written, in order). `{:error, :bounds}` when they do not fit
  the region; badarg for `cells` that are not a proper list of `{key, list}` pairs, an entity
  that is not a tuple with those elements, or one of them not a signed 64-bit integer (checked
  before anything is written).
  """
  @spec publish_entities(t(), offset(), offset(), offset(), integer(), cells(), entity_spec()) ::
          {:ok, non_neg_integer()} | {:error, error() | :seq}
  def publish_entities(_shm, _region, _region_len, _seq, _tick, _cells, _spec),
    do: :erlang.nif_error(:nif_not_loaded)

  @doc """
  `publish_entities/7` with path queries after the body records, as `publish_bodies/7`.
  """
  @spec publish_entities(
          t(),
          offset(),
          offset(),
          offset(),
          integer(),
          cells(),
          entity_spec(),
          binary()
        ) ::
          {:ok, non_neg_integer()} | {:error, error() | :seq}
  def publish_entities(_shm, _region, _region_len, _seq, _tick, _cells, _spec, _queries),
    do: :erlang.nif_error(:nif_not_loaded)

  @doc """
  Reads one region under its sequence lock: loads `seq` (acquire), copies the `len` bytes from
  `region` (its header included: `seq tick n q bytes 0 0 0`, then its records), an acquire
  fence, loads `seq` again.

  `{:error, :torn}` when `seq` is odd (being written) or changed during the copy;
  `{:error, :seq}` when it is even but not `expected_seq`. `len` is at least 8 and the bytes
  lie in the mapping (`{:error, :bounds}`).
  """
  @spec consume(t(), non_neg_integer(), non_neg_integer(), non_neg_integer()) ::
          {:ok, binary()} | {:error, error() | :torn | :seq}
  def consume(_shm, _region, _expected_seq, _len), do: :erlang.nif_error(:nif_not_loaded)

  @doc """
  `consume/4` of an answer region's `n` result records (32 bytes each: `id x y 0`, after the
  64-byte region header), as `[{id, x, y}]` in the records' order.

  A consistent copy must also carry the expected tick and count in its header, no path
  answers (`q` 0) and the results' length (`bytes` 32·n): `{:error, {:tick, found}}`,
  `{:error, {:count, found}}`, `{:error, {:queries, found}}` or `{:error, {:bytes, found}}`
  otherwise. `64 + 32·n` bytes must fit in the region `[region, region + region_len)` and it
  in the mapping (`{:error, :bounds}`).
  """
  @spec consume_results(t(), offset(), offset(), offset(), integer(), non_neg_integer()) ::
          {:ok, [{integer(), integer(), integer()}]} | {:error, answer_error()}
  def consume_results(_shm, _region, _region_len, _expected_seq, _tick, _n),
    do: :erlang.nif_error(:nif_not_loaded)

  @doc """
  `consume_results/6`, and the results' ids must be those of the first `n` body records of
  the request region at `ids_region` (the request these results answer, which only we write),
  in order: `{:error, :ids}` otherwise (after the checks of the tick and the count).
  """
  @spec consume_results(t(), offset(), offset(), offset(), integer(), non_neg_integer(), offset()) ::
          {:ok, [{integer(), integer(), integer()}]} | {:error, answer_error()}
  def consume_results(_shm, _region, _region_len, _expected_seq, _tick, _n, _ids_region),
    do: :erlang.nif_error(:nif_not_loaded)

  @doc """
  `consume_results/7` of an answer to `q` path queries: the header's `q` must be `q` and its
  `bytes` at least 32·n (the path answers follow the results, `bytes - 32·n` of them, within
  the region). Answers `{:ok, results, path_answers}`, the path answers as their bytes
  (`tag status k (x y)*k` each, as in the sidecar's answer frame). The header is read first
  and then the whole answer, each under the sequence lock and expecting the same `seq`.
  """
  @spec consume_results(
          t(),
          offset(),
          offset(),
          offset(),
          integer(),
          non_neg_integer(),
          offset(),
          non_neg_integer()
        ) ::
          {:ok, [{integer(), integer(), integer()}], binary()} | {:error, answer_error()}
  def consume_results(_shm, _region, _region_len, _expected_seq, _tick, _n, _ids_region, _q),
    do: :erlang.nif_error(:nif_not_loaded)

  @doc """
  `consume_results/6` merged into the entities whose bodies were sent, without a list of
  results: `cells` is `[{key, [entity]}]` (the cells `publish_entities/7` wrote, in order) and
  `spec` is `{id_i, x_i, y_i}`, the 0-based positions of an entity's id and position. The i-th
  entity must have the i-th result's id; it is answered with its position replaced by the
  result's, or as the same term when the result is its position. Answers the entities, in
  order.

  `{:error, :ids}` when an entity's id is not its result's, or the cells hold more or fewer
  entities than `n` (after the checks of `consume_results/6`). Badarg for `cells` that are not
  a proper list of `{key, list}` pairs, an entity that is not a tuple of at most 256 elements
  with those positions, or an id that is not an integer.
  """
  @spec consume_moved(
          t(),
          offset(),
          offset(),
          offset(),
          integer(),
          non_neg_integer(),
          cells(),
          positions()
        ) ::
          {:ok, [tuple()]} | {:error, answer_error()}
  def consume_moved(_shm, _region, _region_len, _expected_seq, _tick, _n, _cells, _spec),
    do: :erlang.nif_error(:nif_not_loaded)

  @doc """
  `consume_moved/8` of an answer to `q` path queries, as `consume_results/8`:
  `{:ok, entities, path_answers}`.
  """
  @spec consume_moved(
          t(),
          offset(),
          offset(),
          offset(),
          integer(),
          non_neg_integer(),
          cells(),
          positions(),
          non_neg_integer()
        ) ::
          {:ok, [tuple()], binary()} | {:error, answer_error()}
  def consume_moved(_shm, _region, _region_len, _expected_seq, _tick, _n, _cells, _spec, _q),
    do: :erlang.nif_error(:nif_not_loaded)
end
