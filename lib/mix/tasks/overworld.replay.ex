defmodule Mix.Tasks.Overworld.Replay do
  @shortdoc "Replays a zone's history dump offline and checks it"
  @moduledoc """
  Replays a zone's history (a dump file) in one process, without starting any zone, and checks
  it against what the zone recorded:

      mix overworld.replay FILE [--to-tick T]

  Write the file from the running zone (e.g. in a remote console) with
  `Overworld.Zone.dump_history(zone, path)`. The replay starts at the dump's keyframe and runs
  every tick after it (up to `--to-tick`), comparing each replayed tick with the zone's
  recorded state hash (zones started with `debug: true`) and with every later keyframe
  exactly (`Overworld.Zone.History.replay/2`). It prints a line per keyframe interval, the
  totals, the first mismatch, and the state at the last tick (entity count and zone hash).
  A mismatch (the zone is not deterministic, or the file does not belong to this code) fails
  the task.
  """
  use Mix.Task
  alias Overworld.Zone.History

  @impl true
  def run(argv) do
    {opts, args, invalid} = OptionParser.parse(argv, strict: [to_tick: :integer])

    path =
      case {args, invalid} do
        {[path], []} -> path
        _ -> Mix.raise("usage: mix overworld.replay FILE [--to-tick T]")
      end

    # No zone runs: the code only (the zone's module, to run its handle_entity/3).
    Mix.Task.run("app.config")

    # A one-shot tool reading the operator's own file: the dump may create atoms.
    dump =
      case History.read(path, atoms: :create) do
        {:ok, dump} -> dump
        {:error, reason} -> Mix.raise("cannot read #{path}: #{History.format_error(reason)}")
      end

    c = dump.config
    k = dump.keyframe.tick
    last = History.last_tick(dump)
    to = min(Keyword.get(opts, :to_tick, last), last)

    if to < k, do: Mix.raise("--to-tick #{to} is before the dump's keyframe (tick #{k})")

    info(
      "zone #{inspect(dump.zone)} (#{inspect(c.module)}, #{c.workers} workers): " <>
        "keyframe at tick #{k}, ticks #{k + 1}..#{last}, #{map_size(dump.keyframes)} later keyframes"
    )

    r = History.replay(dump, to_tick: to, progress: &progress(&1, c.keyframe_ticks))

    info(
      "replayed #{r.ticks} ticks (#{k + 1}..#{r.tick}): #{r.checked} hashes compared, " <>
        "#{r.equal} equal; #{r.keyframes} keyframes compared, " <>
        "#{r.keyframes - count(r, :keyframe)} equal; #{length(r.mismatches)} mismatches"
    )

    info("state at tick #{r.tick}: #{r.count} entities, zone hash #{r.hash}")

    if r.first_mismatch do
      [first | _] = r.mismatches

      Mix.raise(
        "replay mismatch: first at tick #{r.first_mismatch} (#{first.kind}: " <>
          "expected #{inspect(first.expected)}, replayed #{inspect(first.got)})"
      )
    end

    r
  end

  # A line per keyframe interval: hashes compared and equal so far, the keyframe.
  defp progress(event, every) do
    if event.keyframe != nil or rem(event.tick, every) == 0 do
      kf = if event.keyframe, do: ", keyframe #{event.keyframe}", else: ""
      info("tick #{event.tick}: #{event.equal}/#{event.checked} hashes equal#{kf}")
    end
  end

  defp count(r, kind), do: Enum.count(r.mismatches, &(&1.kind == kind))

  defp info(line), do: Mix.shell().info(line)
end
