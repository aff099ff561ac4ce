defmodule Overworld.Cluster.Config do
  @moduledoc """
  A node's cluster configuration, read from its environment (a release is configured by
  environment variables; see docs/cluster.md):

  * `OVERWORLD_NODES` — the cluster's nodes, `name@host` separated by commas (this node may
    be among them); or
  * `OVERWORLD_DNS` — a DNS name whose A records are the nodes' addresses (a headless
    service), the nodes named `OVERWORLD_NODE_BASENAME@address` (default basename
    `overworld`), looked up again whenever the node list is wanted (`nodes/1`);
  * `OVERWORLD_COOKIE` — the distribution cookie, or `OVERWORLD_COOKIE_FILE`: a file holding
    it, readable by its owner only (mode 0600: distribution gives full control of every node,
    so a cookie others can read is refused).

  Neither `OVERWORLD_NODES` nor `OVERWORLD_DNS`: a node of its own (no cluster). Both: an
  error. Errors name the variable and what was wrong.

      iex> {:ok, c} = Overworld.Cluster.Config.from_env(%{"OVERWORLD_NODES" => "a@h1, b@h2", "OVERWORLD_COOKIE" => "secret"})
      iex> {c.nodes, c.cookie}
      {[:a@h1, :b@h2], :secret}
      iex> Overworld.Cluster.Config.from_env(%{})
      {:ok, %Overworld.Cluster.Config{nodes: [], dns: nil, basename: "overworld", cookie: nil}}
      iex> Overworld.Cluster.Config.from_env(%{"OVERWORLD_NODES" => "a@h1,bad"})
      {:error, "OVERWORLD_NODES: expected node names name@host separated by commas, got: \\"bad\\""}
  """

  defstruct nodes: [], dns: nil, basename: "overworld", cookie: nil

  @type t :: %__MODULE__{
          nodes: [node],
          dns: String.t() | nil,
          basename: String.t(),
          cookie: atom | nil
        }

  @doc "The configuration in `env` (default: the OS environment)."
  @spec from_env(%{optional(String.t()) => String.t()}) :: {:ok, t} | {:error, String.t()}
  def from_env(env \\ System.get_env()) do
    with {:ok, nodes} <- nodes_of(Map.get(env, "OVERWORLD_NODES")),
         {:ok, dns} <- dns_of(Map.get(env, "OVERWORLD_DNS"), nodes),
         {:ok, basename} <- basename_of(Map.get(env, "OVERWORLD_NODE_BASENAME", "overworld")),
         {:ok, cookie} <-
           cookie_of(Map.get(env, "OVERWORLD_COOKIE"), Map.get(env, "OVERWORLD_COOKIE_FILE")) do
      {:ok, %__MODULE__{nodes: nodes, dns: dns, basename: basename, cookie: cookie}}
    end
  end

  @doc """
  The cluster's nodes now: the configured list, or the DNS name's records (`resolve`: a
  function from the name to `[:inet.ip_address()]`, by default an A-record lookup).

      iex> c = %Overworld.Cluster.Config{dns: "ow.local", basename: "ow"}
      iex> Overworld.Cluster.Config.nodes(c, fn "ow.local" -> [{10, 0, 0, 2}, {10, 0, 0, 1}] end)
      [:"ow@10.0.0.1", :"ow@10.0.0.2"]
  """
  @spec nodes(t, (String.t() -> [:inet.ip_address()])) :: [node]
  def nodes(config, resolve \\ &lookup/1)
  def nodes(%__MODULE__{dns: nil, nodes: nodes}, _resolve), do: nodes

  def nodes(%__MODULE__{dns: name, basename: base}, resolve) do
    name
    |> resolve.()
    |> Enum.map(&:"#{base}@#{:inet.ntoa(&1)}")
    |> Enum.uniq()
    |> Enum.sort()
  end

  defp lookup(name), do: :inet_res.lookup(String.to_charlist(name), :in, :a)

  defp nodes_of(nil), do: {:ok, []}

  defp nodes_of(list) do
    names = list |> String.split(",") |> Enum.map(&String.trim/1) |> Enum.reject(&(&1 == ""))

    case Enum.reject(names, &node_name?/1) do
      [] when names != [] ->
        {:ok, names |> Enum.uniq() |> Enum.map(&String.to_atom/1)}

      [] ->
        {:error,
         "OVERWORLD_NODES: expected at least one node name name@host, got: #{inspect(list)}"}

      [bad | _] ->
        {:error,
         "OVERWORLD_NODES: expected node names name@host separated by commas, got: #{inspect(bad)}"}
    end
  end

  defp node_name?(name), do: Regex.match?(~r/\A[A-Za-z0-9_\-]+@[A-Za-z0-9_\-.]+\z/, name)

  defp dns_of(nil, _nodes), do: {:ok, nil}

  defp dns_of(_name, [_ | _]),
    do: {:error, "OVERWORLD_DNS and OVERWORLD_NODES are both set: give one of them"}

  defp dns_of(name, []) do
    if Regex.match?(~r/\A[A-Za-z0-9\-.]+\z/, name),
      do: {:ok, name},
      else: {:error, "OVERWORLD_DNS: expected a DNS name, got: #{inspect(name)}"}
  end

  defp basename_of(base) do
    if Regex.match?(~r/\A[A-Za-z0-9_\-]+\z/, base),
      do: {:ok, base},
      else:
        {:error,
         "OVERWORLD_NODE_BASENAME: expected letters, digits, _ or -, got: #{inspect(base)}"}
  end

  defp cookie_of(nil, nil), do: {:ok, nil}
  defp cookie_of(cookie, nil), do: cookie(cookie, "OVERWORLD_COOKIE")

  defp cookie_of(nil, path) do
    case File.stat(path) do
      {:ok, %File.Stat{type: :regular, mode: mode}} when Bitwise.band(mode, 0o077) == 0 ->
        path |> File.read!() |> String.trim() |> cookie("OVERWORLD_COOKIE_FILE (#{path})")

      {:ok, %File.Stat{type: :regular, mode: mode}} ->
        {:error,
         "OVERWORLD_COOKIE_FILE: #{path} is readable by others (mode " <>
           "#{Integer.to_string(Bitwise.band(mode, 0o777), 8)}): chmod 600 it"}

      {:ok, _} ->
        {:error, "OVERWORLD_COOKIE_FILE: #{path} is not a regular file"}

      {:error, reason} ->
        {:error, "OVERWORLD_COOKIE_FILE: cannot read #{path}: #{:file.format_error(reason)}"}
    end
  end

  defp cookie_of(_cookie, _path),
    do: {:error, "OVERWORLD_COOKIE and OVERWORLD_COOKIE_FILE are both set: give one of them"}

  defp cookie("", from), do: {:error, "#{from}: the cookie is empty"}
  defp cookie(cookie, _from), do: {:ok, String.to_atom(cookie)}
end
