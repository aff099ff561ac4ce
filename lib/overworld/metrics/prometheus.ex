defmodule Overworld.Metrics.Prometheus do
  @moduledoc """
  The Prometheus text exposition format (version 0.0.4) as iodata, for `GET /metrics`
  (`Overworld.Web.Metrics`, docs/metrics.md).

  A metric family is a `# HELP` and a `# TYPE` line followed by its samples, each
  `name{label="value",...} value`. Label values are escaped (backslash, double quote and
  newline), so any printable text may be one. A histogram's samples are its cumulative
  `name_bucket{le="..."}` counts ending with `le="+Inf"` (equal to `name_count`), then
  `name_sum` and `name_count`.

  Label sets are passed rendered (`labels/1`), so that a set used by many families (a zone's)
  is rendered once (a zone's when the zone starts). Times are kept in integer microseconds and written as exact
  decimal seconds (`seconds/1`), so bucket bounds never suffer from float formatting.

      iex> alias Overworld.Metrics.Prometheus, as: P
      iex> l = P.labels(zone: "{:w, {0, 0}}")
      iex> IO.iodata_to_binary([P.header("demo_total", :counter, "Demo."), P.sample("demo_total", l, 3)])
      "# HELP demo_total Demo.\\n# TYPE demo_total counter\\ndemo_total{zone=\\"{:w, {0, 0}}\\"} 3\\n"
  """

  @typedoc "A rendered label set: `name=\"value\"` pairs joined by commas, without braces."
  @type labels :: iodata

  @typedoc "A family's type."
  @type type :: :counter | :gauge | :histogram

  @doc "The content type of the format."
  @spec content_type() :: String.t()
  def content_type, do: "text/plain; version=0.0.4; charset=utf-8"

  @doc """
  A family's `# HELP` and `# TYPE` lines (the help text escaped: backslash and newline).

      iex> IO.iodata_to_binary(Overworld.Metrics.Prometheus.header("x_bytes", :gauge, "Bytes\\\\now."))
      "# HELP x_bytes Bytes\\\\\\\\now.\\n# TYPE x_bytes gauge\\n"
  """
  @spec header(String.t(), type, String.t()) :: iodata
  def header(name, type, help),
    do: [
      "# HELP ",
      name,
      " ",
      escape_help(help),
      "\n# TYPE ",
      name,
      " ",
      Atom.to_string(type),
      "\n"
    ]

  @typedoc "A family's name and its `header/3` lines, made once (at compile time)."
  @type spec :: {String.t(), iodata}

  @doc """
  A family's name with its `header/3` lines, for `family/3` or for writing its samples.

      iex> {"up", header} = Overworld.Metrics.Prometheus.spec("up", :gauge, "Up.")
      iex> IO.iodata_to_binary(header)
      "# HELP up Up.\\n# TYPE up gauge\\n"
  """
  @spec spec(String.t(), type, String.t()) :: spec
  def spec(name, type, help), do: {name, header(name, type, help)}

  @doc """
  A family of one sample: its header lines and the sample.

      iex> alias Overworld.Metrics.Prometheus, as: P
      iex> P.family(P.spec("up", :gauge, "Up."), [], 1) |> IO.iodata_to_binary()
      "# HELP up Up.\\n# TYPE up gauge\\nup 1\\n"
  """
  @spec family(spec, labels, number | String.t()) :: iodata
  def family({name, header}, labels, value), do: [header, sample(name, labels, value)]

  @doc """
  A label set rendered once, from `{name, value}` pairs (values are strings; pairs whose value
  is nil are left out).

      iex> Overworld.Metrics.Prometheus.labels(zone: ~s(say "hi"\\n), world: nil) |> IO.iodata_to_binary()
      ~S(zone="say \\"hi\\"\\n")
  """
  @spec labels([{atom | String.t(), String.t() | nil}]) :: labels
  def labels(pairs) do
    pairs
    |> Enum.reject(fn {_k, v} -> v == nil end)
    |> Enum.map(fn {k, v} -> [to_string(k), "=\"", escape(v), "\""] end)
    |> Enum.intersperse(",")
  end

  @doc """
  A label value escaped as the format asks: backslash, double quote and newline.

      iex> Overworld.Metrics.Prometheus.escape(~S(a\\b"c) <> "\\nd")
      ~S(a\\\\b\\"c\\nd)
  """
  @spec escape(String.t()) :: String.t()
  def escape(value) when is_binary(value) do
    if String.contains?(value, ["\\", "\"", "\n"]),
      do: value |> String.replace("\\", "\\\\") |> String.replace("\"", "\\\"") |> newlines(),
      else: value
  end

  defp newlines(v), do: String.replace(v, "\n", "\\n")
  defp escape_help(help), do: help |> String.replace("\\", "\\\\") |> newlines()

  @doc """
  One sample line; `value` an integer, a float or a string already formatted (`seconds/1`).

      iex> Overworld.Metrics.Prometheus.sample("up", [], 1) |> IO.iodata_to_binary()
      "up 1\\n"
  """
  @spec sample(String.t(), labels, number | String.t()) :: iodata
  def sample(name, labels, value), do: [name, braces(labels), " ", value(value), "\n"]

  defp braces([]), do: []
  defp braces(""), do: []
  defp braces(labels), do: ["{", labels, "}"]

  @doc """
  A histogram's samples: `les` the bounds as formatted label values (ascending), `below` the
  cumulative count at each, `count` every observation (the `+Inf` bucket) and `sum` their sum
  (formatted or a number).

      iex> alias Overworld.Metrics.Prometheus, as: P
      iex> P.histogram("t_seconds", P.labels(z: "a"), ["0.5", "1"], [1, 2], 3, "2.5") |> IO.iodata_to_binary()
      ~s(t_seconds_bucket{z="a",le="0.5"} 1\\nt_seconds_bucket{z="a",le="1"} 2\\nt_seconds_bucket{z="a",le="+Inf"} 3\\nt_seconds_sum{z="a"} 2.5\\nt_seconds_count{z="a"} 3\\n)
  """
  @spec histogram(String.t(), labels, [String.t()], [non_neg_integer], non_neg_integer, term) ::
          iodata
  def histogram(name, labels, les, below, count, sum) do
    bucket = [name, "_bucket{", labels, if(labels in [[], ""], do: [], else: ","), "le=\""]

    [
      Enum.zip_with(les, below, fn le, n -> [bucket, le, "\"} ", Integer.to_string(n), "\n"] end),
      [bucket, "+Inf\"} ", Integer.to_string(count), "\n"],
      sample([name, "_sum"], labels, sum),
      sample([name, "_count"], labels, count)
    ]
  end

  @doc """
  Microseconds as exact decimal seconds.

      iex> Enum.map([0, 100, 1_280, 2_500_000, 12_345_678], &Overworld.Metrics.Prometheus.seconds/1)
      ["0", "0.0001", "0.00128", "2.5", "12.345678"]
  """
  @spec seconds(non_neg_integer) :: String.t()
  def seconds(us) when is_integer(us) and us >= 0 do
    whole = Integer.to_string(div(us, 1_000_000))

    case rem(us, 1_000_000) do
      0 ->
        whole

      frac ->
        # (Bytes only: the six digits after the point, trailing zeros cut.)
        <<_, digits::binary-size(6)>> = Integer.to_string(1_000_000 + frac)
        whole <> "." <> binary_part(digits, 0, significant(digits, 6))
    end
  end

  defp significant(digits, n) do
    if :binary.at(digits, n - 1) == ?0, do: significant(digits, n - 1), else: n
  end

  defp value(v) when is_integer(v), do: Integer.to_string(v)
  defp value(v) when is_float(v), do: :erlang.float_to_binary(v, [:short])
  defp value(v), do: v
end
