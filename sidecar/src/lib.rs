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

/// Keeps a step's large vectors in the heap between steps: by default glibc maps each allocation
/// above 128 KiB afresh and unmaps it when freed (and trims the heap), so every step would fault
/// its pages in again. For a process that steps again and again (`serve`, the benchmarks); call
/// it before starting any thread.
pub fn keep_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only sets the allocator's thresholds.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 256 << 20);
        libc::mallopt(libc::M_TRIM_THRESHOLD, 512 << 20);
    }
}
