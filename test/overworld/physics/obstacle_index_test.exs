defmodule Overworld.Physics.ObstacleIndexTest do
  use ExUnit.Case, async: true
  alias Overworld.Physics

  # docs/sidecar.md, step 4: the obstacles met are those whose bounding box meets the body's
  # square, however they are indexed.
  test "a circle whose bounding box reaches below 0 meets a body wholly below 0" do
    world = Physics.world(1_048_576, 1_048_576, circles: [{0, 5000, 2000}])
    # Integrated to (-300, 5300): the square [-500, -100] x [5100, 5500] meets the circle's
    # box [-2000, 2000] x [3000, 7000]. d = isqrt(300² + 300²) = 424, push = 2100 - 424 = 1676,
    # (-300 * 1676) div 424 = -1185: (-1485, 6485), then the edges: x = 100.
    assert Physics.step([{1, 0, 5000, -9000, 9000, 100, 1}], world, 30) == [{1, 100, 6485}]
  end
end
