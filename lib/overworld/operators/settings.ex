defmodule Overworld.Operators.Settings do
  @moduledoc """
  The operator options of an `Overworld.Server`: the operators of its configuration
  (`operators: [...]`) and the operator API's settings (`operator_api: [...]`).

  `operators:` is a list of maps (or keyword lists), one per operator:

    * `:name` - 1 to 64 characters of `A-Z a-z 0-9 _ . @ -` (required);
    * `:password_hash` - the text of a PBKDF2 hash, as `mix overworld.operator.hash` prints
      it: `pbkdf2-sha256$<iterations>$<salt>$<key>` (required; `Overworld.Accounts.Password`);
    * `:role` - `"operator"` (the default: every route) or `"viewer"` (reads only); atoms
      work too.

  `operator_api:` is a keyword list:

    * `:token_ttl` - seconds an operator's token lives (default 3,600);
    * `:login_limit_per_address` - logins a client address may try, `{count, seconds}`
      (default `{10, 60}`);
    * `:audit_file` - the audit log's path (default `<data_dir>/operator-audit.log` for the
      server named `Overworld.Server`, else `<data_dir>/operator-audit.<name>.log`);
    * `:audit_max_bytes` - the audit log's size at which it is rotated (default 10 MiB);
    * `:audit_files` - rotated files kept (`.1` the newest; default 4).
  """

  alias Overworld.Accounts.Password
  alias Overworld.Options

  @typedoc "An operator: its name, its role, and its password hash (never shown)."
  @type operator :: %{name: String.t(), role: :operator | :viewer, hash: Password.hash()}

  @typedoc "Validated settings."
  @type t :: %{
          static: %{optional(String.t()) => operator},
          token_ttl: pos_integer,
          login_limit_per_address: Overworld.RateLimit.limit(),
          audit_file: Path.t(),
          audit_max_bytes: pos_integer,
          audit_files: pos_integer
        }

  @name ~r/\A[A-Za-z0-9_.@-]{1,64}\z/

  @doc false
  @spec schema() :: Options.schema()
  def schema do
    [
      token_ttl: {:pos_integer, 3_600},
      login_limit_per_address: {{:tuple_of, [:pos_integer, :pos_integer]}, {10, 60}},
      audit_file: {{:custom, &(is_nil(&1) or is_binary(&1)), "nil or a path (string)"}, nil},
      audit_max_bytes:
        {{:custom, &(is_integer(&1) and &1 >= 1024), "an integer of at least 1024"},
         10 * 1024 * 1024},
      audit_files: {:pos_integer, 4}
    ]
  end

  @doc """
  Validates the operators and the API options of the server `name` whose data directory is
  `data_dir`; raises `ArgumentError` naming what is wrong.

      iex> s = Overworld.Operators.Settings.new([], [token_ttl: 60], Overworld.Server, "/data")
      iex> {s.token_ttl, s.audit_file, s.static}
      {60, "/data/operator-audit.log", %{}}
      iex> Overworld.Operators.Settings.new([%{name: "bob", password_hash: "x"}], [], :s, "/d")
      ** (ArgumentError) invalid option for Overworld.Server operators: operator "bob": expected :password_hash to be the text of a hash (mix overworld.operator.hash), got: "x"
  """
  @spec new(term, keyword, atom, Path.t()) :: t
  def new(operators, api, name, data_dir) do
    s = Options.validate!(api, schema(), "Overworld.Server operator_api")
    file = s.audit_file || Path.join(data_dir, audit_name(name))
    %{s | audit_file: file} |> Map.put(:static, static(operators))
  end

  defp audit_name(Overworld.Server), do: "operator-audit.log"

  defp audit_name(name),
    do: "operator-audit.#{String.replace(Atom.to_string(name), ~r/[^A-Za-z0-9_.-]/, "_")}.log"

  defp static(operators) when is_list(operators) do
    Enum.reduce(operators, %{}, fn op, acc ->
      op = operator!(op)

      if Map.has_key?(acc, op.name),
        do: invalid!("operator #{inspect(op.name)} is given twice")

      Map.put(acc, op.name, op)
    end)
  end

  defp static(other), do: invalid!("expected a list of operators, got: #{inspect(other)}")

  defp operator!(op) when is_list(op) do
    if Keyword.keyword?(op), do: operator!(Map.new(op)), else: bad_entry!(op)
  end

  defp operator!(%{} = op) do
    name = Map.get(op, :name)

    unless valid_name?(name),
      do: invalid!("expected an operator :name (#{describe_name()}), got: #{inspect(name)}")

    case Map.keys(op) -- [:name, :password_hash, :role] do
      [] -> :ok
      keys -> invalid!("operator #{inspect(name)}: unknown keys #{inspect(keys)}")
    end

    hash =
      case Password.decode(Map.get(op, :password_hash)) do
        {:ok, hash} ->
          hash

        :error ->
          invalid!(
            "operator #{inspect(name)}: expected :password_hash to be the text of a hash " <>
              "(mix overworld.operator.hash), got: #{inspect(Map.get(op, :password_hash))}"
          )
      end

    case role(Map.get(op, :role, :operator)) do
      {:ok, role} ->
        %{name: name, role: role, hash: hash}

      :error ->
        invalid!(
          "operator #{inspect(name)}: expected :role to be \"operator\" or \"viewer\", " <>
            "got: #{inspect(Map.get(op, :role))}"
        )
    end
  end

  defp operator!(op), do: bad_entry!(op)

  defp bad_entry!(op),
    do: invalid!("expected each operator to be a map or a keyword list, got: #{inspect(op)}")

  defp invalid!(message),
    do: raise(ArgumentError, "invalid option for Overworld.Server operators: " <> message)

  @doc """
  Whether `name` is a valid operator name (#{"1 to 64 characters of `A-Z a-z 0-9 _ . @ -`"}).

      iex> Overworld.Operators.Settings.valid_name?("alice@ops")
      true
      iex> Overworld.Operators.Settings.valid_name?("al ice")
      false
  """
  @spec valid_name?(term) :: boolean
  def valid_name?(name), do: is_binary(name) and Regex.match?(@name, name)

  @doc false
  def describe_name, do: "1 to 64 characters of A-Z a-z 0-9 _ . @ -"

  @doc """
  A role from its name: `{:ok, :operator | :viewer}` or `:error`.

      iex> Overworld.Operators.Settings.role("viewer")
      {:ok, :viewer}
      iex> Overworld.Operators.Settings.role("admin")
      :error
  """
  @spec role(term) :: {:ok, :operator | :viewer} | :error
  def role(r) when r in [:operator, "operator"], do: {:ok, :operator}
  def role(r) when r in [:viewer, "viewer"], do: {:ok, :viewer}
  def role(_r), do: :error
end
