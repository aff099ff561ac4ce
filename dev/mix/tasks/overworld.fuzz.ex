defmodule Mix.Tasks.Overworld.Fuzz do
  @shortdoc "Feeds random and mutated bytes to every wire decoder"
  @moduledoc """
  A long fuzz run of the wire decoders (the test suite runs 100,000 cases):

      mix overworld.fuzz [--cases 1000000] [--seed N]

  Generates random bytes, valid messages and snapshots with bytes flipped, cut or appended, and
  checks that `Overworld.Protocol.decode/1` and `Overworld.Protocol.Snapshot.apply/3` always
  answer `{:ok, _}` or `{:error, _}`, never raise, and create no atom. Prints the cases run, how
  many decoded and how many were refused, and fails on the first crash with the input.
  """
  use Mix.Task
  alias Overworld.Protocol
  alias Overworld.Protocol.Snapshot
  alias Overworld.Protocol.Vectors

  @impl true
  def run(argv) do
    opts = Overworld.Bench.Args.parse!(argv, [cases: :integer, seed: :integer], "overworld.fuzz")
    if opts[:cases], do: Overworld.Bench.Args.at_least!(opts, [:cases])

    Mix.Task.run("compile")
    cases = Keyword.get(opts, :cases, 1_000_000)
    seed = Keyword.get(opts, :seed, System.unique_integer([:positive]))
    :rand.seed(:exsss, seed)

    templates = Vectors.Wire.__templates__()
    corpus = corpus(templates)
    view = %Snapshot.View{}
    # Warm up: the first calls load modules (and their atoms); the count starts after.
    for bin <- Tuple.to_list(corpus),
        do: {Protocol.decode(bin), Snapshot.apply(view, bin, templates), mutate(bin)}

    atoms = :erlang.system_info(:atom_count)

    {ok, refused} =
      Enum.reduce(1..cases, {0, 0}, fn _, {ok, refused} ->
        bin = input(corpus)

        results =
          try do
            [Protocol.decode(bin), Snapshot.apply(view, bin, templates)]
          catch
            kind, reason ->
              Mix.raise(
                "decoder crashed (seed #{seed}) on #{inspect(bin, limit: :infinity)}: " <>
                  Exception.format(kind, reason, __STACKTRACE__)
              )
          end

        Enum.reduce(results, {ok, refused}, fn
          {:ok, _}, {o, r} -> {o + 1, r}
          {:error, _}, {o, r} -> {o, r + 1}
        end)
      end)

    new_atoms = :erlang.system_info(:atom_count) - atoms

    Mix.shell().info(
      "#{cases} inputs (seed #{seed}) × 2 decoders: #{ok} decoded, #{refused} refused, 0 crashes, #{new_atoms} new atoms"
    )

    if new_atoms > 0, do: Mix.raise("decoding created #{new_atoms} atoms")
    :ok
  end

  # Valid messages and snapshots to mutate.
  defp corpus(templates) do
    messages =
      "protocol/vectors/messages.json"
      |> File.read!()
      |> :jiffy.decode([:return_maps])
      |> Map.fetch!("messages")
      |> Enum.map(&Base.decode16!(&1["hex"], case: :lower))

    snapshots =
      "protocol/vectors/snapshots.json"
      |> File.read!()
      |> :jiffy.decode([:return_maps])
      |> Map.fetch!("snapshots")
      |> Enum.map(&Base.decode16!(&1["hex"], case: :lower))

    _ = templates
    List.to_tuple(messages ++ snapshots)
  end

  defp input(corpus) do
    case :rand.uniform(4) do
      1 -> :rand.bytes(:rand.uniform(64) - 1)
      _ -> mutate(elem(corpus, :rand.uniform(tuple_size(corpus)) - 1))
    end
  end

  defp mutate(bin) do
    size = byte_size(bin)
    at = :rand.uniform(size) - 1

    case :rand.uniform(4) do
      1 ->
        binary_part(bin, 0, at) <>
          <<:rand.uniform(256) - 1>> <> binary_part(bin, at + 1, size - at - 1)

      2 ->
        binary_part(bin, 0, at)

      3 ->
        bin <> :rand.bytes(:rand.uniform(8))

      4 ->
        binary_part(bin, 0, at) <>
          :rand.bytes(:rand.uniform(4)) <> binary_part(bin, at, size - at)
    end
  end
end
