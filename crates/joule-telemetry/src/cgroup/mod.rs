//! CPU accounting of cgroups: v1 `cpuacct.usage` + `cpu.stat` and v2 `cpu.stat`, turned into
//! CPUs used over the interval. The layout is detected from what is present under the root
//! (hybrid machines have both) on the first sample and every ~10 s, so a remount is picked up.
//! Every record is labelled `kernel`: it is the cgroup's own accounting.

mod walk;

use crate::rediscover::Rediscover;
use crate::{Source, SourceError};
use joule_core::snapshot::CgroupCpu;
use joule_core::{Origin, Snapshot};
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

/// Where each hierarchy with CPU accounting sits under the cgroup root.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct Layout {
    /// v1 hierarchy with `cpuacct.usage`, canonical (so that it equals `v1_cpu` when both are
    /// one co-mounted `cpu,cpuacct` hierarchy, also reached through `cpu`/`cpuacct` symlinks).
    pub v1_cpuacct: Option<PathBuf>,
    /// v1 hierarchy with `cpu.stat` (throttling), canonical.
    pub v1_cpu: Option<PathBuf>,
    /// v2 hierarchy: the root itself on a pure-v2 machine, or `unified/` on a hybrid one.
    pub v2: Option<PathBuf>,
}

pub(crate) fn detect(root: &Path) -> Layout {
    if root.join("cgroup.controllers").exists() {
        return Layout { v2: Some(root.to_path_buf()), ..Layout::default() };
    }
    let first_with = |names: &[&str], file: &str| {
        let dir = names.iter().map(|n| root.join(n)).find(|d| d.join(file).exists())?;
        Some(std::fs::canonicalize(&dir).unwrap_or(dir))
    };
    Layout {
        v1_cpuacct: first_with(&["cpuacct", "cpu,cpuacct", "cpuacct,cpu"], "cpuacct.usage"),
        v1_cpu: first_with(&["cpu", "cpu,cpuacct", "cpuacct,cpu"], "cpu.stat"),
        v2: Some(root.join("unified")).filter(|u| u.join("cgroup.controllers").exists()),
    }
}

/// Walks the detected hierarchies and reports each cgroup's usage and throttling.
/// `usage_cpus` is Δusage / interval, `None` on a cgroup's first sample.
/// The layout (which hierarchies, where) is detected on the first sample and again every ~10 s
/// or after a hierarchy's root cgroup could not be read (unmounted); the cgroups under it are
/// walked on every sample, since they come and go all the time.
pub struct CgroupSource {
    root: PathBuf,
    layout: Layout,
    rediscover: Rediscover,
    /// Previous usage (µs) by (hierarchy, path).
    prev: HashMap<(&'static str, String), u64>,
    buf: String,
}

impl CgroupSource {
    pub fn new(cgroup_root: impl Into<PathBuf>) -> Self {
        Self { root: cgroup_root.into(), layout: Layout::default(), rediscover: Rediscover::default(), prev: HashMap::new(), buf: String::new() }
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
        let nr = crate::fsread::keyed_u64(text, "nr_throttled").unwrap_or(0);
        let ns = crate::fsread::keyed_u64(text, "throttled_time").unwrap_or(0);
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

    fn read_v1(&mut self, layout: &Layout, notes: &mut Vec<String>) -> BTreeMap<String, CgroupCpu> {
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
            let Some(usage_us) = crate::fsread::keyed_u64(text, "usage_usec") else { continue };
            // throttled_* appear only where the cpu controller is enabled.
            let throttled_us = crate::fsread::keyed_u64(text, "throttled_usec").unwrap_or(0);
            let nr_throttled = crate::fsread::keyed_u64(text, "nr_throttled").unwrap_or(0);
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
            self.layout = detect(&self.root);
        }
        let layout = std::mem::take(&mut self.layout);
        let result = self.sample_layout(&layout, snap);
        self.layout = layout;
        result
    }
}

impl CgroupSource {
    fn sample_layout(&mut self, layout: &Layout, snap: &mut Snapshot) -> Result<(), SourceError> {
        if *layout == Layout::default() {
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
    fn cpu_and_cpuacct_symlinks_to_one_hierarchy_detect_as_one_directory() {
        let t = tempfile::tempdir().unwrap();
        let shared = t.path().join("cpu,cpuacct");
        std::fs::create_dir(&shared).unwrap();
        std::fs::write(shared.join("cpuacct.usage"), "1\n").unwrap();
        std::fs::write(shared.join("cpu.stat"), "nr_throttled 0\n").unwrap();
        std::os::unix::fs::symlink("cpu,cpuacct", t.path().join("cpu")).unwrap();
        std::os::unix::fs::symlink("cpu,cpuacct", t.path().join("cpuacct")).unwrap();
        let layout = detect(t.path());
        let canonical = std::fs::canonicalize(&shared).unwrap();
        assert_eq!(layout.v1_cpuacct.as_deref(), Some(canonical.as_path()));
        assert_eq!(layout.v1_cpu, layout.v1_cpuacct);
    }
}
