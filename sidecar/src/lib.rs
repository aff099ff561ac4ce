//! Overworld's native sidecar (docs/sidecar.md): the fixed-point physics step
//! ([`physics::step`]) and A* pathfinding on a navigation grid ([`nav::Nav`]), bit for bit the
//! same as `Overworld.Physics` and `Overworld.Physics.Nav` in Elixir, and the binary test
//! frames the `overworld-sidecar` executable reads and answers ([`frames`]).

pub mod frames;
pub mod nav;
pub mod physics;

pub use physics::isqrt;
