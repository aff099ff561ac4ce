defmodule Overworld.Zone.Spawn do
  @moduledoc false
  # Entity specs (keyword lists or maps of entity fields, without id) into entity records.

  require Overworld.Entity
  import Overworld.Entity, only: [entity: 1]
  alias Overworld.Random
  alias Overworld.Zone.{Config, Wire}

  @keys [:kind, :x, :y, :vx, :vy, :heading, :state, :rng, :data, :input]

  @doc """
  The specs of a `{:spawn, ...}` action: one spec or a list of specs.

      iex> Overworld.Zone.Spawn.specs(x: 1, y: 2)
      [[x: 1, y: 2]]
      iex> Overworld.Zone.Spawn.specs([[x: 1, y: 2], %{x: 3, y: 4}])
      [[x: 1, y: 2], %{x: 3, y: 4}]
  """
  @spec specs(term) :: [term]
  def specs(spec) when is_map(spec), do: [spec]

  def specs(specs) when is_list(specs),
    do: if(Keyword.keyword?(specs) and specs != [], do: [specs], else: specs)

  def specs(other), do: [other]

  @doc """
  Builds the entity `id` from a spec. Positions are clamped into the zone (the world, or its region); `:rng` defaults to
  the entity's seed from the zone seed. With a `:wire`, an entity that it cannot encode (a
  value its template cannot quantize, see `Overworld.Template`) is refused:
  `{:error, {:invalid_field, message}}`, the message naming the template and the field.

      iex> config = Overworld.Zone.Config.new!(Overworld.Test.ProbeZone, id: :doc, size: {10, 10})
      iex> {:ok, e} = Overworld.Zone.Spawn.build(config, [kind: :rock, x: -5, y: 3], 7, nil)
      iex> Overworld.Entity.to_map(e) |> Map.take([:id, :kind, :x, :y])
      %{id: 7, kind: :rock, x: 0, y: 3}
      iex> Overworld.Zone.Spawn.build(config, [x: 1, y: 2, colour: :red], 7, nil)
      {:error, {:unknown_fields, [:colour]}}
      iex> Overworld.Zone.Spawn.build(config, [x: 1], 7, nil)
      {:error, {:missing, :y}}
  """
  @spec build(Config.t(), term, pos_integer, term) :: {:ok, Overworld.Entity.t()} | {:error, term}
  def build(%Config{} = config, spec, id, owner) when is_list(spec) or is_map(spec) do
    fields = if is_map(spec) or Keyword.keyword?(spec), do: Map.new(spec), else: %{__bad__: spec}

    with [] <- Map.keys(fields) -- @keys,
         {:ok, x} <- int_field(fields, :x, :required),
         {:ok, y} <- int_field(fields, :y, :required),
         {:ok, vx} <- int_field(fields, :vx, 0),
         {:ok, vy} <- int_field(fields, :vy, 0),
         {:ok, heading} <- int_field(fields, :heading, 0),
         {:ok, rng} <- int_field(fields, :rng, 0) do
      {x, y} = Config.clamp(config, x, y)

      e =
        entity(
          id: id,
          kind: Map.get(fields, :kind),
          x: x,
          y: y,
          vx: vx,
          vy: vy,
          heading: Integer.mod(heading, 65536),
          state: Map.get(fields, :state),
          rng: seed(rng, config.seed, id),
          data: Map.get(fields, :data),
          owner: owner,
          input: Map.get(fields, :input)
        )

      encodable(config, e)
    else
      [:__bad__] -> {:error, {:bad_spec, spec}}
      unknown when is_list(unknown) -> {:error, {:unknown_fields, unknown}}
      {:error, _} = err -> err
    end
  end

  def build(_config, spec, _id, _owner), do: {:error, {:bad_spec, spec}}

  # The workers encode every entity they hold each tick: one they could not encode must not get
  # there (game code returning such an entity keeps its previous state; a spawn has none).
  defp encodable(%Config{wire: nil}, e), do: {:ok, e}

  defp encodable(%Config{wire: wire}, e) do
    case Wire.check(Wire.funs(wire), e) do
      :ok ->
        {:ok, e}

      {:error, :error, %Overworld.Template.Error{} = error, _stack} ->
        {:error, {:invalid_field, Exception.message(error)}}

      # A `{module, function}` source failed.
      {:error, kind, reason, stack} ->
        {:error, {:invalid_field, Exception.format_banner(kind, reason, stack)}}
    end
  end

  # A generator state must be a non-zero 32-bit integer.
  defp seed(rng, zone_seed, id) do
    case Bitwise.band(rng, 0xFFFFFFFF) do
      0 -> Random.seed_for(zone_seed, id)
      s -> s
    end
  end

  defp int_field(fields, key, default) do
    case Map.fetch(fields, key) do
      {:ok, v} when is_integer(v) -> {:ok, v}
      {:ok, v} -> {:error, {:not_an_integer, key, v}}
      :error when default == :required -> {:error, {:missing, key}}
      :error -> {:ok, default}
    end
  end
end
