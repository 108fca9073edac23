//! Maps the cgroup ids the BPF side reports back to paths. A cgroup's kernfs id is its
//! directory's inode number, so a walk of the hierarchy with `stat` is all it takes. Ids are
//! never reused (64-bit), so a path, once resolved, stays right until its cgroup is removed;
//! removals are noticed by rescanning (see [`CgroupNames`]).

use std::collections::{HashMap, HashSet};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Resolves cgroup ids under one hierarchy root.
///
/// The cache is a snapshot of the tree: every rescan builds a fresh id → path map and replaces
/// the old one, so a removed cgroup drops out at the next rescan. Rescans happen every
/// [`CgroupNames::PERIOD`] (that is how removals are noticed: a cached id never misses), and on
/// a lookup miss at most once per [`CgroupNames::MISS_INTERVAL`]. Ids that the last rescan could
/// not resolve are remembered (a negative cache) and trigger no walk until the next periodic
/// one, so a cgroup that stays unresolvable does not cost a tree walk per sample.
#[derive(Debug)]
pub(crate) struct CgroupNames {
    root: PathBuf,
    paths: HashMap<u64, String>,
    /// Ids asked about that the last rescan did not find; cleared by every rescan.
    unresolved: HashSet<u64>,
    scanned_at: Option<Instant>,
}

impl CgroupNames {
    /// Rescan this often even without misses, to notice removed cgroups.
    pub const PERIOD: Duration = Duration::from_secs(10);
    /// Rescan on a miss at most this often.
    pub const MISS_INTERVAL: Duration = Duration::from_secs(1);

    pub fn new(root: PathBuf) -> Self {
        Self { root, paths: HashMap::new(), unresolved: HashSet::new(), scanned_at: None }
    }

    /// The path relative to the root (`/` for the root itself), or `None` if the last rescan
    /// did not find that id.
    pub fn lookup(&self, id: u64) -> Option<&str> {
        self.paths.get(&id).map(String::as_str)
    }

    /// Rescans when one is due: [`Self::PERIOD`] after the previous one, or when one of `ids`
    /// is neither cached nor in the negative cache and the previous rescan is at least
    /// [`Self::MISS_INTERVAL`] old. After a rescan every id of `ids` it did not find goes into
    /// the negative cache. Returns whether it rescanned.
    pub fn refresh(&mut self, ids: &[u64], now: Instant) -> bool {
        if !self.rescan_due(ids, now) {
            return false;
        }
        let fresh = scan(&self.root);
        self.replace(fresh, ids, now);
        true
    }

    fn rescan_due(&self, ids: &[u64], now: Instant) -> bool {
        let Some(at) = self.scanned_at else { return true };
        let age = now.saturating_duration_since(at);
        age >= Self::PERIOD || (age >= Self::MISS_INTERVAL && ids.iter().any(|id| !self.paths.contains_key(id) && !self.unresolved.contains(id)))
    }

    /// Installs the result of a walk (`fresh`), forgetting whatever the previous one found;
    /// the negative cache becomes the ids of `asked` that `fresh` lacks.
    fn replace(&mut self, fresh: HashMap<u64, String>, asked: &[u64], now: Instant) {
        self.unresolved = asked.iter().copied().filter(|id| !fresh.contains_key(id)).collect();
        self.paths = fresh;
        self.scanned_at = Some(now);
    }
}

/// Walks the hierarchy: id (directory inode) → path of every cgroup under `root`. Cost: one
/// `stat` and one `readdir` per cgroup.
fn scan(root: &Path) -> HashMap<u64, String> {
    let mut found = HashMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let Ok(meta) = std::fs::metadata(&dir) else { continue };
        found.insert(meta.ino(), relative(root, &dir));
        let Ok(rd) = std::fs::read_dir(&dir) else { continue };
        for entry in rd.flatten() {
            if entry.file_type().map(|t| t.is_dir()).unwrap_or(false) {
                stack.push(entry.path());
            }
        }
    }
    found
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
    fn ids_are_directory_inodes_relative_to_the_root_and_removed_ones_drop_out_at_the_periodic_rescan() {
        let root = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(root.path().join("a/b")).unwrap();
        let ino = |p: &Path| std::fs::metadata(p).unwrap().ino();
        let (root_id, b) = (ino(root.path()), ino(&root.path().join("a/b")));
        let mut names = CgroupNames::new(root.path().to_path_buf());
        assert_eq!(names.lookup(root_id), None);
        let t0 = Instant::now();
        assert!(names.refresh(&[], t0), "the first refresh always walks");
        assert_eq!(names.lookup(root_id), Some("/"));
        assert_eq!(names.lookup(b), Some("/a/b"));

        std::fs::remove_dir(root.path().join("a/b")).unwrap();
        // A cached id never misses, so only the periodic rescan notices the removal.
        assert!(!names.refresh(&[b], t0 + CgroupNames::MISS_INTERVAL * 2));
        assert_eq!(names.lookup(b), Some("/a/b"));
        assert!(names.refresh(&[b], t0 + CgroupNames::PERIOD));
        assert_eq!(names.lookup(b), None);
        assert_eq!(names.lookup(root_id), Some("/"));
    }

    fn map(entries: &[(u64, &str)]) -> HashMap<u64, String> {
        entries.iter().map(|(id, p)| (*id, p.to_string())).collect()
    }

    #[test]
    fn a_rescan_replaces_the_cache_and_unknown_ids_are_negatively_cached() {
        let mut names = CgroupNames::new(PathBuf::from("/nonexistent"));
        let t0 = Instant::now();
        names.replace(map(&[(1, "/"), (2, "/a"), (3, "/b")]), &[], t0);
        names.replace(map(&[(1, "/"), (3, "/b"), (4, "/c")]), &[2, 4, 9], t0);
        assert_eq!((names.lookup(2), names.lookup(3), names.lookup(4)), (None, Some("/b"), Some("/c")), "replaced, not merged");
        assert_eq!(names.unresolved, HashSet::from([2, 9]), "asked for and not found");

        let later = |d: Duration| t0 + d;
        // Known or negatively cached ids never trigger a walk before the period.
        assert!(!names.rescan_due(&[1, 3, 4, 2, 9], later(CgroupNames::PERIOD / 2)));
        // A new unknown id does, but not twice within MISS_INTERVAL.
        assert!(!names.rescan_due(&[5], later(CgroupNames::MISS_INTERVAL / 2)));
        assert!(names.rescan_due(&[5], later(CgroupNames::MISS_INTERVAL)));
        // The period forces a walk that forgets the negative cache.
        assert!(names.rescan_due(&[], later(CgroupNames::PERIOD)));
        names.replace(map(&[(1, "/")]), &[], later(CgroupNames::PERIOD));
        assert!(names.unresolved.is_empty());
    }
}
