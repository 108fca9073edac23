//! A bounded walk of one cgroup hierarchy: depth and count limits keep a machine with tens of
//! thousands of cgroups from turning one sample into a long scan, and directories that vanish
//! mid-walk (cgroups come and go all the time) are skipped without a word.

use std::fs;
use std::path::Path;

/// Deepest level visited (the hierarchy root is level 0).
pub(crate) const MAX_DEPTH: usize = 6;
/// Most cgroups visited in one hierarchy per sample.
pub(crate) const MAX_CGROUPS: usize = 2000;

/// Cgroup paths under `root`, relative to it and starting with `/` (the root itself is `/`),
/// in depth-first order. The flag is true when a limit cut the walk short.
pub(crate) fn walk(root: &Path) -> (Vec<String>, bool) {
    let mut out = vec!["/".to_string()];
    let mut truncated = false;
    visit(root, "", 1, &mut out, &mut truncated);
    (out, truncated)
}

fn visit(dir: &Path, rel: &str, depth: usize, out: &mut Vec<String>, truncated: &mut bool) {
    let Ok(rd) = fs::read_dir(dir) else { return }; // vanished or unreadable: skip
    for entry in rd.flatten() {
        // d_type from getdents: no stat per entry; cgroupfs reports directories reliably.
        if !entry.file_type().map(|t| t.is_dir()).unwrap_or(false) {
            continue;
        }
        let Some(name) = entry.file_name().to_str().map(str::to_owned) else { continue };
        if depth > MAX_DEPTH || out.len() >= MAX_CGROUPS {
            *truncated = true;
            return;
        }
        let child = format!("{rel}/{name}");
        out.push(child.clone());
        visit(&entry.path(), &child, depth + 1, out, truncated);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn depth_limit_truncates() {
        let t = tempfile::tempdir().unwrap();
        let deep = (0..MAX_DEPTH + 2).fold(t.path().to_path_buf(), |p, i| p.join(format!("d{i}")));
        fs::create_dir_all(&deep).unwrap();
        let (paths, truncated) = walk(t.path());
        assert!(truncated);
        assert_eq!(paths.len(), MAX_DEPTH + 1);
        assert_eq!(paths[1], "/d0");
    }

    #[test]
    fn missing_root_is_just_the_root() {
        let (paths, truncated) = walk(Path::new("/nonexistent/joule"));
        assert_eq!(paths, vec!["/"]);
        assert!(!truncated);
    }
}
