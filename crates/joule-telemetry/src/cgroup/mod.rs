//! CPU accounting of cgroups: v1 `cpuacct.usage` + `cpu.stat` and v2 `cpu.stat`, turned into
//! CPUs used over the interval. The layout comes from `joule_core::cgroupfs` (hybrid machines
//! have both v1 and v2) on the first sample and every ~10 s, so a remount is picked up.
//! Every record is labelled `kernel`: it is the cgroup's own accounting.

mod walk;

use crate::rediscover::Rediscover;
use crate::{Source, SourceError};
use joule_core::cgroupfs::{Controller, Layout};
use joule_core::effects::RealEffects;
use joule_core::fsread::keyed_u64;
use joule_core::snapshot::CgroupCpu;
use joule_core::{Origin, Snapshot};
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

/// The hierarchies with CPU accounting this source walks, out of the machine's layout.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct Hierarchies {
    /// v1 hierarchy with `cpuacct.usage`; equal to `v1_cpu` when both are one co-mounted
    /// `cpu,cpuacct` hierarchy (the layout resolves the `cpu`/`cpuacct` symlinks to it).
    pub v1_cpuacct: Option<PathBuf>,
    /// v1 hierarchy with `cpu.stat` (throttling).
    pub v1_cpu: Option<PathBuf>,
    /// v2 hierarchy: the root itself on a pure-v2 machine, or `unified/` on a hybrid one.
    pub v2: Option<PathBuf>,
}

impl Hierarchies {
    pub(crate) fn of(layout: &Layout) -> Hierarchies {
        Hierarchies {
            v1_cpuacct: layout.v1(Controller::Cpuacct).map(Path::to_path_buf),
            // A kernel without CFS bandwidth has a cpu hierarchy without `cpu.stat`: nothing
            // to read there, and an unreadable root would trigger a detection every sample.
            v1_cpu: layout.v1(Controller::Cpu).filter(|d| d.join("cpu.stat").exists()).map(Path::to_path_buf),
            v2: layout.unified.as_ref().map(|u| u.dir.clone()),
        }
    }
}

/// Walks the detected hierarchies and reports each cgroup's usage and throttling.
/// `usage_cpus` is Δusage / interval, `None` on a cgroup's first sample.
/// The layout (which hierarchies, where) is detected on the first sample and again every ~10 s
/// or after a hierarchy's root cgroup could not be read (unmounted); the cgroups under it are
/// walked on every sample, since they come and go all the time.
pub struct CgroupSource {
    root: PathBuf,
    layout: Hierarchies,
    rediscover: Rediscover,
    /// Previous usage (µs) by (hierarchy, path).
    prev: HashMap<(&'static str, String), u64>,
    buf: String,
}

impl CgroupSource {
    pub fn new(cgroup_root: impl Into<PathBuf>) -> Self {
        Self { root: cgroup_root.into(), layout: Hierarchies::default(), rediscover: Rediscover::default(), prev: HashMap::new(), buf: String::new() }
    }

    /// Reads a small file into the shared buffer; `None` when it is gone (the cgroup raced
    /// away) or unreadable, which the caller skips.
    fn read(&mut self, path: &Path) -> Option<&str> {
        crate::fsread::read_into(path, &mut self.buf).ok()?;
        Some(&self.buf)
    }

    /// `cpuacct.usage` of the cgroup at `dir` into its record.
    fn read_cpuacct(&mut self, dir: &Path, rel: &str, out: &mut BTreeMap<String, CgroupCpu>) {
        let Some(ns) = self.read(&dir.join("cpuacct.usage")).and_then(|s| s.trim().parse::<u64>().ok()) else {
            self.root_gone(rel);
            return;
        };
        v1_entry(out, rel).usage_us = ns / 1000;
    }

    /// The throttling of v1 `cpu.stat` of the cgroup at `dir` into its record.
    fn read_cpu_stat(&mut self, dir: &Path, rel: &str, out: &mut BTreeMap<String, CgroupCpu>) {
        let Some(text) = self.read(&dir.join("cpu.stat")) else {
            self.root_gone(rel);
            return;
        };
        let nr = keyed_u64(text, "nr_throttled").unwrap_or(0);
        let ns = keyed_u64(text, "throttled_time").unwrap_or(0);
        let e = v1_entry(out, rel);
        e.nr_throttled = nr;
        e.throttled_us = ns / 1000;
    }

    /// A cgroup's file could not be read: a child raced away (normal), or, for the root
    /// cgroup, the hierarchy is gone (unmounted): detect the layout again next sample.
    fn root_gone(&mut self, rel: &str) {
        if rel == "/" {
            self.rediscover.invalidate();
        }
    }

    fn read_v1(&mut self, layout: &Hierarchies, notes: &mut Vec<String>) -> BTreeMap<String, CgroupCpu> {
        let mut out: BTreeMap<String, CgroupCpu> = BTreeMap::new();
        // One co-mounted hierarchy: walk it once and read both files of each cgroup.
        let shared = layout.v1_cpuacct.is_some() && layout.v1_cpuacct == layout.v1_cpu;
        if let Some(dir) = &layout.v1_cpuacct {
            let (paths, truncated) = walk::walk(dir);
            note_truncated(truncated, dir, notes);
            for rel in &paths {
                let cg = dir.join(rel.trim_start_matches('/'));
                self.read_cpuacct(&cg, rel, &mut out);
                if shared {
                    self.read_cpu_stat(&cg, rel, &mut out);
                }
            }
        }
        if let Some(dir) = layout.v1_cpu.as_ref().filter(|_| !shared) {
            let (paths, truncated) = walk::walk(dir);
            note_truncated(truncated, dir, notes);
            for rel in &paths {
                self.read_cpu_stat(&dir.join(rel.trim_start_matches('/')), rel, &mut out);
            }
        }
        out
    }

    fn read_v2(&mut self, dir: &Path, notes: &mut Vec<String>) -> BTreeMap<String, CgroupCpu> {
        let mut out = BTreeMap::new();
        let (paths, truncated) = walk::walk(dir);
        note_truncated(truncated, dir, notes);
        for rel in paths {
            let Some(text) = self.read(&dir.join(rel.trim_start_matches('/')).join("cpu.stat")) else {
                self.root_gone(&rel);
                continue;
            };
            let Some(usage_us) = keyed_u64(text, "usage_usec") else { continue };
            // throttled_* appear only where the cpu controller is enabled.
            let throttled_us = keyed_u64(text, "throttled_usec").unwrap_or(0);
            let nr_throttled = keyed_u64(text, "nr_throttled").unwrap_or(0);
            let cg = CgroupCpu { path: rel.clone(), hierarchy: "v2".into(), usage_us, usage_cpus: None, throttled_us, nr_throttled, source: Origin::Kernel };
            out.insert(rel, cg);
        }
        out
    }
}

/// The v1 record of `rel`: the cpuacct and cpu hierarchies are separate trees (or one, when
/// co-mounted) and a cgroup may exist in only one of them.
fn v1_entry<'o>(out: &'o mut BTreeMap<String, CgroupCpu>, rel: &str) -> &'o mut CgroupCpu {
    if !out.contains_key(rel) {
        out.insert(rel.to_string(), CgroupCpu { path: rel.to_string(), hierarchy: "v1".into(), source: Origin::Kernel, ..Default::default() });
    }
    out.get_mut(rel).expect("inserted above")
}

fn note_truncated(truncated: bool, dir: &Path, notes: &mut Vec<String>) {
    if truncated {
        notes.push(format!(
            "cgroups under {} cut at depth {} / {} cgroups: deeper or further ones are not reported",
            dir.display(),
            walk::MAX_DEPTH,
            walk::MAX_CGROUPS
        ));
    }
}

impl Source for CgroupSource {
    fn name(&self) -> &'static str {
        "cgroup"
    }

    fn sample(&mut self, snap: &mut Snapshot) -> Result<(), SourceError> {
        if self.rediscover.due(snap.interval_ms) {
            self.layout = Hierarchies::of(&Layout::detect(&self.root, &RealEffects));
        }
        let layout = std::mem::take(&mut self.layout);
        let result = self.sample_layout(&layout, snap);
        self.layout = layout;
        result
    }
}

impl CgroupSource {
    fn sample_layout(&mut self, layout: &Hierarchies, snap: &mut Snapshot) -> Result<(), SourceError> {
        if *layout == Hierarchies::default() {
            snap.notes.push(format!("no cgroup CPU accounting under {} (no cpuacct, cpu or cgroup2 hierarchy)", self.root.display()));
            self.prev.clear();
            return Ok(());
        }
        let mut all = Vec::new();
        if layout.v1_cpuacct.is_some() || layout.v1_cpu.is_some() {
            all.extend(self.read_v1(layout, &mut snap.notes).into_values());
        }
        if let Some(dir) = &layout.v2 {
            all.extend(self.read_v2(dir, &mut snap.notes).into_values());
        }
        let interval_us = snap.interval_ms.saturating_mul(1000);
        let mut next = HashMap::with_capacity(all.len());
        for cg in &mut all {
            let key = (if cg.hierarchy == "v1" { "v1" } else { "v2" }, cg.path.clone());
            if let Some(&prev) = self.prev.get(&key) {
                if interval_us > 0 && cg.usage_us >= prev {
                    cg.usage_cpus = Some((cg.usage_us - prev) as f64 / interval_us as f64);
                }
            }
            next.insert(key, cg.usage_us);
        }
        self.prev = next;
        snap.cgroups = all;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_v1_cpu_hierarchy_without_cpu_stat_is_not_walked() {
        let t = tempfile::tempdir().unwrap();
        for (dir, file) in [("cpu", "cpu.shares"), ("cpuacct", "cpuacct.usage")] {
            std::fs::create_dir(t.path().join(dir)).unwrap();
            std::fs::write(t.path().join(dir).join(file), "1\n").unwrap();
        }
        let h = Hierarchies::of(&Layout::detect(t.path(), &RealEffects));
        assert_eq!(h, Hierarchies { v1_cpuacct: Some(t.path().join("cpuacct")), v1_cpu: None, v2: None });
        std::fs::write(t.path().join("cpu/cpu.stat"), "nr_throttled 0\n").unwrap();
        assert_eq!(Hierarchies::of(&Layout::detect(t.path(), &RealEffects)).v1_cpu, Some(t.path().join("cpu")));
    }
}
