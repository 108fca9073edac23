//! The Snapshot: one immutable picture of the machine per control period. Sources fill it,
//! policies read it, exporters (Prometheus, JSON, `joule monitor`) render it. Its JSON form is
//! what `joule monitor --once --json` prints, so field names are a public interface.

use crate::Origin;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Snapshot {
    /// Wall-clock time of the sample, milliseconds since the Unix epoch.
    pub taken_at_ms: u64,
    /// Time covered by the rates in this snapshot (since the previous sample).
    pub interval_ms: u64,
    pub cpu: Cpu,
    /// Pressure stall information; absent when the kernel has no PSI.
    pub psi: Option<Psi>,
    /// CPU accounting of cgroups (v1 `cpu,cpuacct` and v2 `cpu.stat`).
    pub cgroups: Vec<CgroupCpu>,
    /// Tasks with the largest CPU wait (schedstat run delay) over the interval.
    pub task_wait: Vec<TaskWait>,
    pub power: Power,
    pub thermal: Thermal,
    pub stage: Stage,
    pub frequency: Vec<CpuFreq>,
    pub runq_latency: Vec<RunqLatency>,
    /// Whether joule's eBPF programs are running, and if not, why.
    pub bpf: BpfStatus,
    /// Which scheduler class runs the machine's tasks: the kernel's own, or a sched_ext one.
    pub sched_ext: SchedExt,
    /// The nap monitors' readings and the nap's state (`[nap]` enabled only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nap: Option<NapReadings>,
    /// The flow monitor's view of the network stack (`[net] flow_monitor`); `None` when off.
    #[serde(default)]
    pub net: Option<NetFlows>,
    /// How many processes each `[[class]]` has (the membership reading, summed).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub classes: Vec<ClassMembers>,
    /// The process monitor's counts, when membership is kept from kernel events (eBPF on).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub process_events: Option<ProcessEvents>,
    /// The pod index's refreshes from the container runtime, when a class matches pods by
    /// name, namespace, labels or annotations (issue 37).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pods: Option<crate::membership::PodStats>,
    /// Which process belongs to which class and where each class lives: the one membership
    /// reading every policy and actuator uses (not in the JSON: it lists every member).
    #[serde(skip)]
    pub membership: std::sync::Arc<crate::membership::Membership>,
    /// Human-readable notes about what is missing or estimated on this machine.
    pub notes: Vec<String>,
}

/// How class membership is kept from the kernel's process events: events applied, events the
/// ring buffer could not hold (each loss costs a walk of /proc), walks after a loss.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ProcessEvents {
    pub events_total: u64,
    pub lost_total: u64,
    pub resyncs_total: u64,
    /// Time spent walking /proc for those resyncs, the cost a flood of events puts on the agent.
    #[serde(default)]
    pub resync_seconds_total: f64,
    /// Losses whose walk waited for the minimum gap between walks (the membership was that
    /// much staler meanwhile; one walk then covered them all).
    #[serde(default)]
    pub resyncs_deferred_total: u64,
    /// Events were lost and their walk of /proc is still to come: the membership is stale until
    /// then, so the control loop keeps its full period (it must not rest past the walk).
    #[serde(default)]
    pub resync_pending: bool,
    /// Events the kernel's filter kept (they could change no class), summed over the CPUs.
    #[serde(default)]
    pub dropped_total: u64,
    /// Walks of /proc to find the children of a process that joined a class, or whose children
    /// a followed reaper took in, which the filter had not sent (counted in `resyncs_total`).
    #[serde(default)]
    pub discoveries_total: u64,
    /// Processes the cache knows: with the kernel's filter, those it follows (members, their
    /// other children, pods' processes waiting for the runtime's word).
    pub processes: usize,
    pub source: Origin,
}

/// One class's size in the membership reading.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ClassMembers {
    pub class: String,
    pub processes: usize,
    /// Its cgroup v2 id, where it has a v2 directory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cgroup2_id: Option<u64>,
    pub source: Origin,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Cpu {
    /// Busy fraction (0.0–1.0) of each CPU over the interval, indexed by CPU number.
    pub utilization: Vec<f64>,
    /// Busy fraction of the whole machine (mean over CPUs).
    pub total_utilization: f64,
    pub source: Origin,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Psi {
    pub cpu: Option<PsiLine>,
    pub io: Option<PsiLine>,
    pub memory: Option<PsiLine>,
    /// Always `kernel`: the kernel's own stall accounting.
    pub source: Origin,
}

/// The `some` line of a /proc/pressure file (and `full` where the kernel gives it).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PsiLine {
    pub some_avg10: f64,
    pub some_total_us: u64,
    pub full_avg10: Option<f64>,
    pub full_total_us: Option<u64>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct CgroupCpu {
    /// Path relative to the hierarchy root, starting with `/`.
    pub path: String,
    /// "v1" or "v2".
    pub hierarchy: String,
    pub usage_us: u64,
    /// CPUs used over the interval (1.0 = one full CPU); None on the first sample.
    pub usage_cpus: Option<f64>,
    pub throttled_us: u64,
    pub nr_throttled: u64,
    /// Always `kernel`: the cgroup's own CPU accounting files.
    pub source: Origin,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct TaskWait {
    pub pid: i32,
    /// The thread's name, byte for byte (its process chose it); JSON gets `Comm::text`.
    pub comm: crate::Comm,
    /// Time spent runnable but waiting for a CPU over the interval.
    pub wait_us: u64,
    /// `ebpf` (sched_switch accounting in the kernel) or `kernel` (/proc schedstat run delay).
    pub source: Origin,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Power {
    /// Machine power over the interval: the sum of the domains with `part_of_total`.
    pub watts: f64,
    pub source: Origin,
    pub domains: Vec<PowerDomain>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct PowerDomain {
    /// e.g. `intel-rapl:0` (package-0) or `hwmon0/power1`.
    pub name: String,
    pub watts: f64,
    /// Cumulative energy, wrap-around already handled. For RAPL it is the hardware's energy
    /// counter; for hwmon (which gives only instantaneous power) and the model it is joule's
    /// integration of the point readings over each interval — derived from sensor power, still
    /// labelled by `source`, and blind to what happened between two readings.
    pub energy_joules_total: f64,
    pub source: Origin,
    /// Whether `watts` is one of the terms of `Power::watts`. Domains that are inside another
    /// (RAPL subzones, psys), overlap it (a PSU's input and output, a GPU) or stand beside a
    /// model total are listed with `false`.
    #[serde(default)]
    pub part_of_total: bool,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Thermal {
    pub zones: Vec<ThermalZone>,
    /// The RC-model temperature. The Sampler runs the model on every sample, sensor or not, so
    /// it is present whenever the `thermal_model` source ran. Always `source: "model"`.
    pub model: Option<ModelTemperature>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ThermalZone {
    /// e.g. `thermal_zone0` or `hwmon1/temp1`.
    pub name: String,
    /// The zone's `type` (e.g. `acpitz`, `x86_pkg_temp`) or the hwmon chip name.
    pub kind: String,
    pub temp_celsius: f64,
    pub trips: Vec<TripPoint>,
    pub source: Origin,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TripPoint {
    /// `passive`, `active`, `hot`, `critical`.
    pub kind: String,
    pub temp_celsius: f64,
    pub hysteresis_celsius: f64,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ModelTemperature {
    pub temp_celsius: f64,
    pub source: Origin,
}

/// What `<sysfs>/kernel/sched_ext` says: `state` ("enabled", "disabled", …; "absent" when the
/// kernel has no sched_ext) and `ops`, the name of the BPF scheduler running ("" for none;
/// joule's is "joule").
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SchedExt {
    pub state: String,
    pub ops: String,
    pub source: Origin,
}

impl SchedExt {
    /// joule's own scheduler is the one running.
    pub fn ours(&self) -> bool {
        self.state == "enabled" && self.ops == "joule"
    }
}

/// The thermal stage (0 = cool) and the temperature it was computed from.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Stage {
    pub value: u32,
    pub temp_celsius: f64,
    /// Who computed the stage: `ebpf` when the in-kernel program did, `userspace` when eBPF
    /// is off and the agent's fallback policy did, `none` when there was no temperature to
    /// compute it from (the value is then a placeholder 0).
    pub computed_by: StageEngine,
    /// Where the temperature behind it came from: `sensor`, `model`, or `unknown` when no
    /// reading has reached the stage yet.
    pub temp_source: Origin,
    /// What holds the stage at its value: the temperature, or the power budget
    /// (`thermal.power_thresholds_watts`) when the power stage is the higher one. Either way
    /// `temp_celsius` is the real temperature, never the power stage's stand-in.
    #[serde(default)]
    pub driven_by: StageDriver,
    /// The power budget's side, when one is configured and power was read.
    #[serde(default)]
    pub power: Option<StagePower>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StageDriver {
    #[default]
    Temperature,
    Power,
}

impl StageDriver {
    pub fn as_str(self) -> &'static str {
        match self {
            StageDriver::Temperature => "temperature",
            StageDriver::Power => "power",
        }
    }
}

/// The power stage: machine power against `thermal.power_thresholds_watts`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct StagePower {
    pub stage: u32,
    pub watts: f64,
    /// `sensor` (RAPL, hwmon) or `model`, as the power reading says.
    pub source: Origin,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StageEngine {
    Ebpf,
    Userspace,
    /// Nothing computed it: no temperature yet. The default, so an unset stage never reads as
    /// computed in the kernel.
    #[default]
    None,
}

impl StageEngine {
    pub fn as_str(self) -> &'static str {
        match self {
            StageEngine::Ebpf => "ebpf",
            StageEngine::Userspace => "userspace",
            StageEngine::None => "none",
        }
    }
}

/// Whether joule's eBPF programs run in this process, and why not when they do not. Shown in
/// the JSON, `joule monitor` and `/metrics`, so "eBPF is off" is never silent.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BpfStatus {
    /// True when the programs are loaded (run-queue latency, per-task wait, thermal stage).
    pub enabled: bool,
    /// Why eBPF is off: `flag` (--no-bpf), `config` (telemetry.bpf = false), `not_root`,
    /// `no_btf` (the kernel has none) or `load_failed` (the kernel refused a program; the
    /// notes have its words). Empty when enabled.
    pub off_reason: String,
    /// Where the stage map is pinned, when it is (the agent).
    pub pin_dir: Option<String>,
}

/// cpufreq's view of a CPU's clock: `scaling_cur_freq` is what the kernel (the governor, or the
/// driver's last reading) reports, so it is `kernel` accounting, not a sensor.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct CpuFreq {
    pub cpu: u32,
    pub cur_khz: u64,
    pub min_khz: u64,
    pub max_khz: u64,
    /// The hardware's range (`cpuinfo_min_freq`, `cpuinfo_max_freq`): what a cap in % means.
    #[serde(default)]
    pub cpuinfo_min_khz: u64,
    #[serde(default)]
    pub cpuinfo_max_khz: u64,
    pub source: Origin,
}

/// Run-queue latency of one cgroup. Every cgroup the eBPF program has seen since it loaded is
/// listed, also in an interval without wake-ups (then `count` and the percentiles are 0), so
/// that `since_load` is a continuous counter.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct RunqLatency {
    /// cgroup path (relative to the hierarchy root), or `id:<n>` when it no longer exists.
    pub cgroup: String,
    /// Wake-ups that reached a CPU over the interval.
    pub count: u64,
    /// Interval percentiles and maximum (0 when `count` is 0).
    pub p50_us: f64,
    pub p99_us: f64,
    pub max_us: f64,
    /// The same wake-ups accumulated since the program loaded, as histogram buckets.
    #[serde(default)]
    pub since_load: LatencyBuckets,
    pub source: Origin,
}

/// A latency histogram as Prometheus wants one: cumulative buckets with fixed bounds, counted
/// since the program loaded (never reset per interval).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct LatencyBuckets {
    /// Bucket bounds in ns, ascending; each is a slot boundary of the kernel's histogram, so
    /// every bucket is an exact sum of whole slots.
    pub le_ns: Vec<u64>,
    /// `counts[i]`: wake-ups whose latency was below `le_ns[i]` (cumulative, so non-decreasing).
    pub counts: Vec<u64>,
    /// All wake-ups (the `+Inf` bucket): at least the last of `counts`.
    pub count: u64,
    /// Sum of the latencies, estimated: the kernel keeps no sum, so each wake-up counts at the
    /// midpoint of its slot (within 6.25% of its true value).
    pub estimated_sum_ns: f64,
}

/// What the nap monitors saw this period, and what the nap actuator reports back (its waiter
/// thread counts wakes and the eBPF program counts packets on the watched ports).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct NapReadings {
    pub monitors: Vec<MonitorReading>,
    /// Napping now (the actuator's state when the snapshot was taken).
    pub napping: bool,
    /// Wakes since the agent started (any reason); a change is activity.
    pub wakes_total: u64,
    /// Packets (SYNs, datagrams) the eBPF program saw on the watched ports since load; a
    /// change is activity. 0 without eBPF.
    pub port_hits_total: u64,
}

/// One monitor's verdict for the period.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct MonitorReading {
    /// `tcp`, `udp`, `processes`, `cpu_load`, `block_io`, `console`, `interface`.
    pub name: String,
    pub active: bool,
    /// What it saw, with units ("2 connections on :80", "cpu 3.1% ≤ 20%").
    pub detail: String,
    pub source: Origin,
}

/// What the flow monitor (flow.bpf.c) saw over the interval (the named flows: over the last
/// flow interval, `flows_interval_ms`). Label cardinality is bounded:
/// `flows` has at most `[net] top_n` named flows (most bytes over the interval first) and one
/// `other` entry summing every other flow.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct NetFlows {
    pub flows: Vec<FlowSample>,
    /// Per cgroup2 and direction, every flow of its sockets.
    pub cgroups: Vec<CgroupNet>,
    /// Per CPU, the time spent in the network softirqs.
    pub softirq: Vec<CpuSoftirq>,
    /// Flows the kernel map holds (all of them, not only the top N).
    pub flows_tracked: usize,
    /// The interval `flows` covers: between the last two reads of the flow table (`[net]
    /// flow_period_ms`), not the control period, which `cgroups` and `softirq` cover; the
    /// snapshots in between carry the last top N.
    #[serde(default)]
    pub flows_interval_ms: u64,
    pub source: Origin,
}

/// One flow (or `other`) over the interval. Bytes are IP bytes as the socket layer hands
/// them over (a GSO packet counts its headers once); packets count GSO segments.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct FlowSample {
    /// `tcp 10.0.0.1:5201>10.0.0.2:40000` (this host's end first), or `other`.
    pub flow: String,
    /// `tcp`, `udp`, or `mixed` for `other`.
    pub proto: String,
    /// `egress` or `ingress`.
    pub direction: String,
    /// The socket's cgroup2 path (relative to the hierarchy root), `id:<n>` if unknown, or
    /// `mixed` for `other`.
    pub cgroup: String,
    pub bytes: u64,
    pub packets: u64,
    /// bytes / packets over the interval (0 without packets).
    pub mean_packet_bytes: f64,
    /// bytes per second over the interval.
    pub rate_bytes_per_second: f64,
    /// TCP segments retransmitted over the interval.
    pub retransmits: u64,
    pub source: Origin,
}

/// One cgroup2's traffic in one direction: counted since the monitor loaded, and its rate
/// over the interval.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CgroupNet {
    pub cgroup: String,
    pub direction: String,
    pub bytes_total: u64,
    pub packets_total: u64,
    pub retransmits_total: u64,
    /// Bytes and packets over the interval (all of the cgroup's flows, not only the top N).
    #[serde(default)]
    pub bytes: u64,
    #[serde(default)]
    pub packets: u64,
    pub rate_bytes_per_second: f64,
    pub source: Origin,
}

/// One CPU's network softirq time: cumulative since load and its share of the interval.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CpuSoftirq {
    pub cpu: usize,
    pub net_rx_seconds_total: f64,
    pub net_tx_seconds_total: f64,
    pub net_rx_ratio: f64,
    pub net_tx_ratio: f64,
    pub source: Origin,
}
