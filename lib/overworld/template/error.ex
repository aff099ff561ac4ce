defmodule Overworld.Template.Error do
  @moduledoc """
  Raised when a value cannot be quantized for a field of a template: a value that is not an
  integer for a numeric field (`:uint`, `:int`, `:fixed`, `:angle`), or a value that is not one
  of the field's `values` for an `:enum` or `:bool` field.

  `template` is the template's name (nil from `Overworld.Template.Field.quantize/2`, which does
  not know it), `field` the field's name, `value` the value, `values` the field's set (nil for
  numeric fields).
  """
  defexception [:template, :field, :value, :values]

  @type t :: %__MODULE__{
          template: atom | nil,
          field: atom,
          value: term,
          values: [term] | nil
        }

  @impl true
  def message(%__MODULE__{template: template, field: field, value: value, values: values}) do
    where = if template, do: "template #{inspect(template)}, field ", else: "field "
    expected = if values, do: "one of #{inspect(values)}", else: "an integer"
    where <> "#{inspect(field)}: expected #{expected}, got: #{inspect(value)}"
  end
end
