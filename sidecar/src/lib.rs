//! Overworld's native sidecar (docs/sidecar.md): the fixed-point physics step
//! ([`physics::step`]), bit for bit the same as `Overworld.Physics` in Elixir.

pub mod physics;

pub use physics::isqrt;
