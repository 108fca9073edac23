//! Maps the cgroup ids the BPF side reports back to paths, and finds which hierarchy to key
//! by. A cgroup's kernfs id is its directory's inode number, so a walk of the hierarchy with
//! `stat` is all it takes; ids are never reused (64-bit), so resolved paths are cached.

use crate::runqlat::Hierarchy;
use std::collections::HashMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// Picks the hierarchy from a `/proc/self/mounts` text: the v1 `cpu` controller's hierarchy
/// when one is mounted (the processes of a v1 machine live there), else the cgroup2 mount.
pub fn detect_from_mounts(mounts: &str) -> Option<(Hierarchy, PathBuf)> {
    let mut v2 = None;
    for line in mounts.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        let [_, mnt, fstype, opts, ..] = f[..] else { continue };
        let mnt = PathBuf::from(mnt.replace("\\040", " "));
        match fstype {
            "cgroup" if opts.split(',').any(|o| o == "cpu") => return Some((Hierarchy::V1Cpu, mnt)),
            "cgroup2" if v2.is_none() => v2 = Some((Hierarchy::V2, mnt)),
            _ => {}
        }
    }
    v2
}

/// Resolves cgroup ids under one hierarchy root.
#[derive(Debug)]
pub struct CgroupNames {
    root: PathBuf,
    cache: HashMap<u64, String>,
}

impl CgroupNames {
    pub fn new(root: PathBuf) -> Self {
        Self { root, cache: HashMap::new() }
    }

    /// The path relative to the root (`/` for the root itself), or `None` if no cgroup has
    /// that id any more.
    pub fn lookup(&mut self, id: u64) -> Option<String> {
        self.cache.get(&id).cloned()
    }

    /// Walks the hierarchy again and records every cgroup it finds. Cost: one `stat` per
    /// cgroup, so callers do it at most once per sample and only on a cache miss.
    pub fn rescan(&mut self) {
        let mut stack = vec![self.root.clone()];
        while let Some(dir) = stack.pop() {
            let Ok(meta) = std::fs::metadata(&dir) else { continue };
            self.cache.insert(meta.ino(), relative(&self.root, &dir));
            let Ok(rd) = std::fs::read_dir(&dir) else { continue };
            for entry in rd.flatten() {
                if entry.file_type().map(|t| t.is_dir()).unwrap_or(false) {
                    stack.push(entry.path());
                }
            }
        }
    }

    /// Forgets an id whose cgroup is gone.
    pub fn forget(&mut self, id: u64) {
        self.cache.remove(&id);
    }
}

fn relative(root: &Path, dir: &Path) -> String {
    match dir.strip_prefix(root) {
        Ok(rel) if rel.as_os_str().is_empty() => "/".to_string(),
        Ok(rel) => format!("/{}", rel.display()),
        Err(_) => dir.display().to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn v1_cpu_wins_over_cgroup2_and_cpuacct_or_cpuset_do_not_count() {
        let mounts = "cgroup2 /sys/fs/cgroup/unified cgroup2 rw,relatime 0 0\n\
                      cgroup /sys/fs/cgroup/cpuacct cgroup rw,relatime,cpuacct 0 0\n\
                      cgroup /sys/fs/cgroup/cpuset cgroup rw,relatime,cpuset 0 0\n\
                      cgroup /sys/fs/cgroup/cpu cgroup rw,relatime,cpu 0 0\n";
        assert_eq!(detect_from_mounts(mounts), Some((Hierarchy::V1Cpu, "/sys/fs/cgroup/cpu".into())));
        let comounted = "cgroup /sys/fs/cgroup/cpu,cpuacct cgroup rw,nosuid,cpu,cpuacct 0 0\n";
        assert_eq!(detect_from_mounts(comounted), Some((Hierarchy::V1Cpu, "/sys/fs/cgroup/cpu,cpuacct".into())));
    }

    #[test]
    fn pure_v2_machine() {
        let mounts = "proc /proc proc rw 0 0\ncgroup2 /sys/fs/cgroup cgroup2 rw,nsdelegate 0 0\n";
        assert_eq!(detect_from_mounts(mounts), Some((Hierarchy::V2, "/sys/fs/cgroup".into())));
        assert_eq!(detect_from_mounts("proc /proc proc rw 0 0\n"), None);
    }

    #[test]
    fn ids_are_directory_inodes_relative_to_the_root() {
        let root = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(root.path().join("a/b")).unwrap();
        let ino = |p: &Path| std::fs::metadata(p).unwrap().ino();
        let mut names = CgroupNames::new(root.path().to_path_buf());
        assert_eq!(names.lookup(ino(root.path())), None);
        names.rescan();
        assert_eq!(names.lookup(ino(root.path())).as_deref(), Some("/"));
        assert_eq!(names.lookup(ino(&root.path().join("a/b"))).as_deref(), Some("/a/b"));
        names.forget(ino(root.path()));
        assert_eq!(names.lookup(ino(root.path())), None);
    }
}
