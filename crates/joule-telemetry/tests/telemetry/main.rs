//! joule-telemetry's one integration-test binary: every source on the fixture trees under
//! `testdata/`, the Sampler end to end, and a smoke test plus a cost measurement on this
//! machine's real /proc and /sys (no root needed).

mod boards;
mod cgroups;
mod common;
mod power;
mod procfs;
mod real_machine;
mod thermal;
