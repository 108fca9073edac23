//! joule-core: the vocabulary every joule crate shares — where a reading came from, the
//! Snapshot that sources fill and policies read, the agent config, the undo journal that makes
//! every actuator reversible, the one trait in front of privileged side effects, and how the
//! machine names tasks: where the cgroup hierarchies are (`cgroupfs`) and what /proc says about
//! a task (`procfs`, its name byte for byte: `Comm`).

pub mod agent_lock;
pub mod board_limits;
pub mod cgroupfs;
pub mod clock;
pub mod comm;
pub mod config;
pub mod control;
pub mod cpulist;
pub mod effects;
pub mod energy;
pub mod fsread;
pub mod journal;
pub mod kubepods;
pub mod membership;
pub mod metric;
pub mod mountinfo;
pub mod mounts;
pub mod nap;
pub mod netlimit;
pub mod origin;
pub mod policy;
pub mod private_fs;
pub mod procfs;
pub mod qdisc;
pub mod sched_ext;
pub mod snapshot;
pub mod testing;
pub mod text;
pub mod thermal_sensors;
pub mod upgrade;
pub mod view;

pub use comm::Comm;
pub use origin::Origin;
pub use snapshot::Snapshot;
