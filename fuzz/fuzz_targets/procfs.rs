//! Fuzz target: the /proc parsers (stat, status, cgroup) never panic on any bytes, and a task's
//! name or a cgroup's path in any bytes comes back exactly, hiding no other field
//! (`joule_core::testing::procfs_round_trips`).
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| joule_core::testing::procfs_round_trips(data));
