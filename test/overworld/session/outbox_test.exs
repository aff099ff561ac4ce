defmodule Overworld.Session.OutboxTest do
  use ExUnit.Case, async: true
  doctest Overworld.Session.Outbox
end
