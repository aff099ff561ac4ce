//! Overworld's native sidecar (docs/sidecar.md): the fixed-point physics step
//! ([`physics::step`]) and A* pathfinding on a navigation grid ([`nav::Nav`]), bit for bit the
//! same as `Overworld.Physics` and `Overworld.Physics.Nav` in Elixir, the binary test frames the
//! `overworld-sidecar` executable reads and answers ([`frames`]), and the zone's protocol it
//! serves on a Unix socket ([`serve`], its frames in [`wire`], its shared segment in [`shm`]).

pub mod frames;
pub mod nav;
pub mod physics;
pub mod serve;
pub mod shm;
pub mod wire;

pub use physics::isqrt;
