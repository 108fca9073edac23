//! joule-act: the acting half of joule's control loop. One actuator per kernel resource, each
//! the only writer of its knobs; a mechanism is a policy (in joule-core) that asks for knob
//! settings, never code that writes them (docs/architecture.md has the rule and the map).

pub mod cgroup_cpu;
pub mod cpufreq;
pub mod elevate;
pub mod nap;
pub mod netlimit;
pub mod placement;
pub mod scx;
