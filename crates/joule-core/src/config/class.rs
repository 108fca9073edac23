//! `[[class]]`: a named set of tasks and what it is promised or limited to. Classes are the
//! vocabulary every mechanism shares; the QoS crate (`joule-qos`) turns them into cgroups.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClassConfig {
    pub name: String,
    /// Which tasks belong to the class: every kind of rule given must match (`comm` and `uid`
    /// both), any one value within a kind. Children of the same user follow their parent.
    #[serde(rename = "match", default)]
    pub matches: MatchRules,
    /// Let `match` take the whole machine (`cgroup = ["/"]`, `pid = [1]`): refused unless set.
    #[serde(default)]
    pub whole_machine: bool,
    /// Name of the enclosing class, for nested guarantees (a child cannot ask more).
    #[serde(default)]
    pub parent: Option<String>,
    /// RT bandwidth (cgroup v1 `cpu.rt_runtime_us` / `cpu.rt_period_us`; where the kernel has
    /// no RT group scheduling, a SCHED_DEADLINE reservation of runtime/period per thread).
    pub rt_runtime_us: Option<u64>,
    pub rt_period_us: Option<u64>,
    /// The deadline backend: how many of the class's threads get a reservation (admission
    /// counts runtime/period × this many). Unset: as many as the class has CPUs, which is the
    /// most RT group bandwidth would give it (runtime/period of each of its CPUs).
    pub rt_threads: Option<u32>,
    /// CFS bandwidth (v1 `cpu.cfs_quota_us`/`cpu.cfs_period_us`, v2 `cpu.max`, `cpu.max.burst`).
    pub quota_us: Option<u64>,
    pub period_us: Option<u64>,
    pub burst_us: Option<u64>,
    /// CPU weight (v2 `cpu.weight` 1–10000; v1 `cpu.shares` derived from it).
    pub weight: Option<u64>,
    /// CPUs the class may use, in cpuset list syntax ("0", "1-3,6").
    pub cpus: Option<String>,
    /// What the thermal stages do to the class (see `[[thermal.stage]]`).
    #[serde(default)]
    pub thermal: ThermalRole,
    /// The EEVDF slice of the class's fair threads, µs (Linux 6.12+, `sched_setattr(2)`'s
    /// `sched_runtime`): a thread with a shorter slice than the one running preempts it when it
    /// wakes, instead of waiting for the next tick. 100–100000, or 0 for the kernel's default.
    /// Unset: [`LABELLED_SLICE_US`] for a `thermal = "labelled"` class, the default otherwise.
    pub latency_slice_us: Option<u32>,
    /// `cpu.idle` on the class's cgroup (Linux 5.15+, v1 and v2): the group gets the smallest
    /// weight and every non-idle task that wakes preempts it, so its work takes only what
    /// nothing else wants. Unset: true for a `thermal = "best_effort"` class without a `weight`
    /// or RT runtime. An idle top-level class's cgroup lives beside joule's group, not in it
    /// (docs/qos.md, "Best-effort classes").
    pub cpu_idle: Option<bool>,
}

/// The slice a labelled class gets unless it says otherwise, µs. Measured (docs/qos.md,
/// "Latency slice", `scripts/nested-cap-latency.sh 3`): beside a CFS-capped nested class, a
/// 2 ms sleeper's wake-up p99 was 4,000 µs (one 4 ms tick) with the kernel's default slice
/// (1.4 ms here) or 1 ms, and 121–150 µs with 300 µs.
pub const LABELLED_SLICE_US: u32 = 300;

/// The range of slices the kernel accepts, µs.
pub const SLICE_US: std::ops::RangeInclusive<u32> = 100..=100_000;

/// A class's part in thermal degradation.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ThermalRole {
    /// Untouched by the stages (cpufreq caps still apply to the whole machine).
    #[default]
    None,
    /// Protected: the scheduler's always-served queue; never capped.
    Labelled,
    /// Takes the cuts: capped to the stage's `best_effort_cpu_pct`.
    BestEffort,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MatchRules {
    /// cgroup paths relative to the hierarchy root ("/system.slice/foo.service").
    pub cgroup: Vec<String>,
    /// Task command names as in /proc/PID/comm (15 characters at most).
    pub comm: Vec<String>,
    /// Executable paths as in /proc/PID/exe.
    pub exe: Vec<String>,
    pub pid: Vec<i32>,
    pub uid: Vec<u32>,
    /// systemd system units (`nginx.service`, a `.scope`): on a systemd host the class acts on
    /// these units through systemd (docs/systemd.md); a process matches when it lives in one.
    pub unit: Vec<String>,
    /// systemd slices (`batch.slice`): as `unit`, for every unit below the slice too.
    pub slice: Vec<String>,
    /// Kubernetes pods (docs/kubernetes.md): by QoS class from the kubelet's cgroups, and by
    /// namespace, name, labels, annotations and container from the node's runtime.
    pub pod: super::pod::PodRules,
}

impl ClassConfig {
    /// Whether the class's cgroup is a `cpu.idle` one.
    pub fn idle(&self) -> bool {
        self.cpu_idle.unwrap_or(self.thermal == ThermalRole::BestEffort && self.weight.is_none() && self.rt_runtime_us.is_none())
    }

    /// The slice joule gives the class's threads, µs; None: it leaves their slices alone.
    pub fn slice_us(&self) -> Option<u32> {
        match self.latency_slice_us {
            Some(0) => None,
            Some(us) => Some(us),
            None => (self.thermal == ThermalRole::Labelled).then_some(LABELLED_SLICE_US),
        }
    }

    /// What the class gives its members that other tasks do not have, in words (empty: it
    /// only takes away, or changes nothing). `elevated`: `[elevate]` schedules this class;
    /// `placed`: an `[energy]` target places it (CPUs and a frequency picked for it, a
    /// bandwidth held for it). docs/security.md: a class that grants must be matched by
    /// something no user chooses. `Config::grants` gives both from the config.
    pub fn grants(&self, elevated: bool, placed: bool) -> Vec<&'static str> {
        let mut g = Vec::new();
        if self.rt_runtime_us.is_some_and(|r| r > 0) {
            g.push("RT runtime");
        }
        if self.weight.is_some_and(|w| w > DEFAULT_WEIGHT) {
            g.push("a CPU weight above the default 100");
        }
        if self.cpus.is_some() {
            g.push("CPUs of its own (a cpuset)");
        }
        if self.thermal == ThermalRole::Labelled {
            g.push("thermal protection (labelled)");
        }
        if elevated {
            g.push("elevate's real-time slices");
        }
        if placed {
            g.push("an energy placement target (the CPUs, frequency and bandwidth its target needs)");
        }
        g
    }
}

/// cgroup v2 `cpu.weight` of a group nobody changed.
pub const DEFAULT_WEIGHT: u64 = 100;

impl MatchRules {
    /// Whether a task matches: every kind of rule that is given matches (any one value within
    /// a kind). `comm` and `cgroups` (the task's cgroup paths in every hierarchy) are matched as
    /// the kernel has them, byte for byte: a rule is text, so a name that is not UTF-8 matches
    /// no `comm` rule and never passes for one, while its uid, exe, cgroups and pod still
    /// match. `pods`: what the node's runtime said about its pods (empty without one).
    pub fn matches<'p>(
        &self,
        pid: i32,
        comm: &[u8],
        exe: Option<&std::path::Path>,
        uid: Option<u32>,
        cgroups: impl IntoIterator<Item = &'p [u8]>,
        pods: &super::PodIndex,
    ) -> bool {
        let cheap = !self.is_empty()
            && (self.pid.is_empty() || self.pid.contains(&pid))
            && (self.comm.is_empty() || self.comm.iter().any(|c| c.as_bytes() == comm))
            && (self.exe.is_empty() || exe.is_some_and(|e| self.exe.iter().any(|x| std::path::Path::new(x) == e)))
            && (self.uid.is_empty() || uid.is_some_and(|u| self.uid.contains(&u)));
        // The paths are collected only for rules that read them (a walk matches every process).
        if !cheap || (self.cgroup.is_empty() && self.unit.is_empty() && self.slice.is_empty() && self.pod.is_empty()) {
            return cheap;
        }
        let paths: Vec<&[u8]> = cgroups.into_iter().collect();
        if !self.cgroups_match(&paths) {
            return false;
        }
        if self.pod.is_empty() {
            return true;
        }
        // The pod's and container's levels are the kubelet's and the runtime's names, text;
        // whatever someone made below a container's cgroup does not change whose it is.
        let texts: Vec<std::borrow::Cow<str>> = paths.iter().map(|p| String::from_utf8_lossy(p)).collect();
        self.pod.matches(texts.iter().map(|p| p.as_ref()), pods)
    }

    /// The `cgroup`, `unit` and `slice` rules against a task's cgroup paths (each kind given
    /// must hold for one of them). A unit or slice is matched only where systemd puts it
    /// ([`systemd_unit_at`]), outside every delegated subtree: a user's own manager, a delegated
    /// service's or a container's processes may name a cgroup `nginx.service` too.
    fn cgroups_match(&self, paths: &[&[u8]]) -> bool {
        if self.cgroup.is_empty() && self.unit.is_empty() && self.slice.is_empty() {
            return true;
        }
        let has = |names: &[String]| names.is_empty() || paths.iter().any(|p| !delegated(p) && names.iter().any(|n| systemd_unit_at(p, n)));
        (self.cgroup.is_empty() || paths.iter().any(|p| self.cgroup_matches(p))) && has(&self.unit) && has(&self.slice)
    }

    /// The rules name systemd units or slices and nothing else: the class is those units.
    pub fn only_units(&self) -> bool {
        (!self.unit.is_empty() || !self.slice.is_empty())
            && self.cgroup.is_empty()
            && self.comm.is_empty()
            && self.exe.is_empty()
            && self.pid.is_empty()
            && self.uid.is_empty()
            && self.pod.is_empty()
    }

    /// Every unit and slice named, units first.
    pub fn units(&self) -> impl Iterator<Item = &str> {
        self.unit.iter().chain(&self.slice).map(String::as_str)
    }

    /// Whether the rules hold something no unprivileged user can choose for a process: a uid,
    /// a system unit or slice (matched outside delegated subtrees only), a cgroup outside
    /// every delegated subtree (systemd's `user@UID.service`, where a user
    /// creates cgroups), or a pod namespace (who may create pods there is the cluster's RBAC;
    /// the kubepods cgroups only the kubelet makes). `comm` and `exe` are claims: anyone can
    /// name a process or exec a copy of a binary; a pid can be won by forking until it comes
    /// round; a pod's labels, annotations and names are its author's.
    pub fn unforgeable(&self) -> bool {
        !self.uid.is_empty()
            || !self.unit.is_empty()
            || !self.slice.is_empty()
            || (!self.cgroup.is_empty() && self.cgroup.iter().all(|c| !delegated(c)))
            || !self.pod.namespace.is_empty()
    }

    /// The rules that take the whole machine, in words.
    pub fn whole_machine(&self) -> Option<String> {
        if let Some(c) = self.cgroup.iter().find(|c| c.trim_end_matches('/').is_empty()) {
            return Some(format!("cgroup = {c:?} is every process on the machine"));
        }
        if self.pid.contains(&1) {
            return Some("pid = 1 is init, and the processes that follow it".into());
        }
        None
    }

    /// Whether the cgroup `path` (byte for byte) is one of the `cgroup` rules or lies below one
    /// ("" or "/" matches everything).
    pub fn cgroup_matches<P: AsRef<[u8]> + ?Sized>(&self, path: &P) -> bool {
        let path = path.as_ref();
        self.cgroup.iter().any(|rule| {
            let rule = rule.trim_end_matches('/').as_bytes();
            rule.is_empty() || path == rule || path.strip_prefix(rule).is_some_and(|r| r.starts_with(b"/"))
        })
    }

    /// Whether any rule is given.
    pub fn is_empty(&self) -> bool {
        self.cgroup.is_empty()
            && self.comm.is_empty()
            && self.exe.is_empty()
            && self.pid.is_empty()
            && self.uid.is_empty()
            && self.unit.is_empty()
            && self.slice.is_empty()
            && self.pod.is_empty()
    }
}

/// Whether the cgroup `path` is, or lies below, the cgroup systemd gives the unit or slice
/// `name`: `name` right below a chain of slices from the root, each slice named after the one
/// above it (`/a.slice/a-b.slice/x.service`), and a slice `name` itself such a link. systemd
/// delegates only services and scopes (and container managers and administrators hand out
/// non-slice directories), so whatever lies below a service, a scope or any directory that is not
/// a slice was made by someone the delegation trusts, not by systemd: a `nginx.service` there is
/// not the system's nginx (issue 33).
/// Compared byte for byte: a level someone named in any bytes is simply not `name`.
pub fn systemd_unit_at<P: AsRef<[u8]> + ?Sized>(path: &P, name: &str) -> bool {
    let (path, name) = (path.as_ref(), name.as_bytes());
    let mut above: Option<&[u8]> = None; // the stem of the slice above; None: the root slice
    for seg in path.split(|b| *b == b'/').filter(|s| !s.is_empty()) {
        let stem = seg.strip_suffix(b".slice");
        let linked = stem.is_some_and(|st| match above {
            None => !st.is_empty() && !st.contains(&b'-'),
            Some(up) => st.strip_prefix(up).and_then(|r| r.strip_prefix(b"-")).is_some_and(|r| !r.is_empty() && !r.contains(&b'-')),
        });
        if seg == name {
            return stem.is_none() || linked;
        }
        if !linked {
            return false;
        }
        above = stem;
    }
    false
}

/// Whether a cgroup path lies in a subtree delegated to a user (systemd's `user@UID.service`,
/// or any `*.service` under `user.slice` that a user manager runs), where that user creates
/// and names cgroups.
pub fn delegated<P: AsRef<[u8]> + ?Sized>(path: &P) -> bool {
    path.as_ref().split(|b| *b == b'/').any(|seg| seg.starts_with(b"user@"))
}

#[cfg(test)]
mod tests {
    use crate::config::Config;

    fn problems(text: &str) -> String {
        Config::parse(text).err().map(|e| e.iter().map(|p| format!("{:?}: {}\n", p.line, p.message)).collect()).unwrap_or_default()
    }

    #[test]
    fn a_best_effort_class_is_idle_unless_it_has_a_weight_or_says_no_and_idle_refuses_what_it_contradicts() {
        let c = |extra: &str| Config::parse(&format!("[[class]]\nname = \"b\"\n{extra}")).unwrap().classes.remove(0);
        assert!(c("thermal = \"best_effort\"\n").idle());
        assert!(!c("thermal = \"best_effort\"\nweight = 50\n").idle());
        assert!(!c("thermal = \"best_effort\"\ncpu_idle = false\n").idle());
        assert!(c("cpu_idle = true\n").idle() && !c("").idle());
        let e = problems("[[class]]\nname = \"b\"\ncpu_idle = true\nweight = 50\nrt_runtime_us = 1000\nthermal = \"labelled\"\nmatch = { uid = [0] }\n");
        for what in ["with a weight", "with RT runtime", "with thermal = \"labelled\""] {
            assert!(e.contains(&format!("cpu_idle = true {what}")), "{what}: {e}");
        }
    }

    #[test]
    fn a_class_that_grants_must_match_by_something_no_user_chooses() {
        for (grant, why) in
            [("rt_runtime_us = 1000", "RT runtime"), ("weight = 101", "weight above"), ("cpus = \"0\"", "cpuset"), ("thermal = \"labelled\"", "labelled")]
        {
            for forgeable in
                ["comm = [\"nginx\"]", "exe = [\"/usr/sbin/nginx\"]", "pid = [4242]", "cgroup = [\"/user.slice/user-1001.slice/user@1001.service/x\"]"]
            {
                let e = problems(&format!("[[class]]\nname = \"c\"\n{grant}\nmatch = {{ {forgeable} }}\n"));
                assert!(e.contains("any user can meet") && e.contains(why) && e.contains("Some(4)"), "{grant} / {forgeable}: {e}");
            }
            for trusted in ["uid = [0]", "comm = [\"nginx\"], uid = [0, 33]", "cgroup = [\"/system.slice/nginx.service\"]"] {
                assert_eq!(problems(&format!("[[class]]\nname = \"c\"\n{grant}\nmatch = {{ {trusted} }}\n")), "", "{grant} / {trusted}");
            }
        }
        let e = problems("[[class]]\nname = \"p\"\nmatch = { comm = [\"player\"] }\n[elevate]\nclass = \"p\"\n");
        assert!(e.contains("elevate's real-time slices"), "{e}");
        assert_eq!(problems("[[class]]\nname = \"be\"\nquota_us = 5000\nweight = 50\nmatch = { comm = [\"miner\"] }\n"), "", "taking away needs no proof");
    }

    #[test]
    fn rt_threads_needs_rt_runtime_and_a_sane_count() {
        let m = "match = { uid = [0] }\n";
        assert!(problems(&format!("[[class]]\nname = \"c\"\nrt_runtime_us = 1000\nrt_threads = 4\n{m}")).is_empty());
        let e = problems(&format!("[[class]]\nname = \"c\"\nrt_threads = 4\n{m}"));
        assert!(e.contains("rt_threads without rt_runtime_us"), "{e}");
        let e = problems(&format!("[[class]]\nname = \"c\"\nrt_runtime_us = 1000\nrt_threads = 0\n{m}"));
        assert!(e.contains("rt_threads = 0 is outside 1..=4096"), "{e}");
    }

    #[test]
    fn whole_machine_matches_are_refused_unless_asked_for() {
        for m in ["cgroup = [\"\"]", "cgroup = [\"/\"]", "pid = [1]"] {
            let e = problems(&format!("[[class]]\nname = \"c\"\nquota_us = 1000\nmatch = {{ {m} }}\n"));
            assert!(e.contains("whole") || e.contains("every process") || e.contains("init"), "{m}: {e}");
            assert_eq!(problems(&format!("[[class]]\nname = \"c\"\nquota_us = 1000\nwhole_machine = true\nmatch = {{ {m} }}\n")), "", "{m}");
        }
    }

    #[test]
    fn every_kind_given_must_match_and_any_value_within_one() {
        let cfg = Config::parse("[[class]]\nname = \"c\"\nmatch = { comm = [\"a\", \"b\"], uid = [0, 33] }\n").unwrap();
        let m = &cfg.classes[0].matches;
        let none: [&[u8]; 0] = [];
        assert!(m.matches(1, b"b", None, Some(33), none, &Default::default()));
        assert!(!m.matches(1, b"b", None, Some(1001), none, &Default::default()), "comm alone is not enough");
        assert!(!m.matches(1, b"c", None, Some(0), none, &Default::default()), "uid alone is not enough");
        assert!(!m.matches(1, b"a", None, None, none, &Default::default()), "an unknown uid matches no uid rule");
    }

    /// A name or a cgroup that is not UTF-8 is matched as the bytes it is: never as its lossy
    /// text (U+FFFD), and without losing the rules it does meet.
    #[test]
    fn names_and_cgroups_that_are_not_utf8_are_matched_as_bytes() {
        let cfg = Config::parse(
            "[[class]]\nname = \"lossy\"\nmatch = { comm = [\"\u{fffd}\u{fffd}audjx\"] }\n\
             [[class]]\nname = \"uid\"\nmatch = { uid = [64001] }\n\
             [[class]]\nname = \"tree\"\nmatch = { cgroup = [\"/jobs\"] }\n",
        )
        .unwrap();
        let (lossy, uid, tree) = (&cfg.classes[0].matches, &cfg.classes[1].matches, &cfg.classes[2].matches);
        let none: [&[u8]; 0] = [];
        let name: &[u8] = b"\xff\xfeaudjx";
        assert!(!lossy.matches(9, name, None, Some(64001), none, &Default::default()), "its lossy form is not its name");
        assert!(lossy.matches(9, "\u{fffd}\u{fffd}audjx".as_bytes(), None, None, none, &Default::default()), "those very bytes are");
        assert!(uid.matches(9, name, None, Some(64001), none, &Default::default()));
        let weird: &[u8] = b"/jobs/\xff\xfe";
        assert!(tree.matches(9, name, None, None, [weird], &Default::default()), "below /jobs whatever its own name");
        assert!(!tree.matches(9, name, None, None, [&b"/jobs\xff"[..]], &Default::default()), "/jobs\\xff is not below /jobs");
        assert!(super::delegated(&b"/user.slice/user-1.slice/user@1.service/\xff"[..]));
    }

    /// Issue 33, item 1: a unit or slice is where systemd puts it, not any path segment of its
    /// name: a delegated directory's owner can make `audrt.service` below it.
    #[test]
    fn regression_a_unit_is_matched_only_where_systemd_puts_it() {
        use super::systemd_unit_at;
        for (path, name, want) in [
            ("/system.slice/audrt.service", "audrt.service", true),
            ("/system.slice/audrt.service/sub/deeper", "audrt.service", true),
            ("/init.scope", "init.scope", true),
            ("/a.slice/a-b.slice/a-b-c.slice/x.service", "x.service", true),
            ("/a.slice/a-b.slice/x.service", "a-b.slice", true),
            ("/system.slice", "system.slice", true),
            // Below a directory root handed out, a delegated service, a container's scope:
            ("/jx-deleg/audrt.service", "audrt.service", false),
            ("/system.slice/deleg.service/audrt.service", "audrt.service", false),
            ("/system.slice/docker-1.scope/system.slice/audrt.service", "audrt.service", false),
            ("/machine.slice/systemd-nspawn@c.service/payload/system.slice", "system.slice", false),
            // Slices that are not named after the one above them are not systemd's.
            ("/a.slice/c-b.slice/x.service", "x.service", false),
            ("/a-b.slice/x.service", "x.service", false),
            ("/a.slice/a-b-c.slice/x.service", "x.service", false),
            ("/a.slice/a-b.slice", "b.slice", false),
            ("/system.slice/other.service", "audrt.service", false),
        ] {
            assert_eq!(systemd_unit_at(path, name), want, "{name} at {path}");
        }
        let cfg = Config::parse("[[class]]\nname = \"c\"\nrt_runtime_us = 50000\nmatch = { unit = [\"audrt.service\"] }\n").unwrap();
        let m = &cfg.classes[0].matches;
        assert!(m.matches(7, b"x", None, Some(0), [&b"/system.slice/audrt.service"[..]], &Default::default()));
        assert!(
            !m.matches(7, b"x", None, Some(1001), [&b"/jx-deleg/audrt.service"[..]], &Default::default()),
            "a delegated directory's audrt.service is not the unit"
        );
    }
}
