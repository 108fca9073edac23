//! `/proc/<pid>/mountinfo` parsed into what joule asks of it: where each filesystem is mounted,
//! its type and its superblock options (`hidepid`). Format: proc(5).

use std::path::{Path, PathBuf};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MountEntry {
    pub mount_point: PathBuf,
    pub fstype: String,
    pub super_options: String,
}

impl MountEntry {
    /// A procfs mounted with `hidepid` other than 0/off: other users' processes are hidden.
    pub fn hides_pids(&self) -> bool {
        self.fstype == "proc" && self.super_options.split(',').any(|o| o.starts_with("hidepid=") && o != "hidepid=0" && o != "hidepid=off")
    }
}

/// Parses mountinfo text; lines it cannot read are skipped. Mount points keep the kernel's
/// octal escapes (`\040` for a space): joule only compares them with paths it chose.
pub fn parse(text: &str) -> Vec<MountEntry> {
    text.lines()
        .filter_map(|l| {
            let (left, right) = l.split_once(" - ")?;
            let mount_point = left.split_whitespace().nth(4)?;
            let mut r = right.split_whitespace();
            let fstype = r.next()?;
            let super_options = r.nth(1).unwrap_or("");
            Some(MountEntry { mount_point: mount_point.into(), fstype: fstype.into(), super_options: super_options.into() })
        })
        .collect()
}

/// Reads and parses `path` (empty when unreadable).
pub fn read(path: &Path) -> Vec<MountEntry> {
    std::fs::read_to_string(path).map(|t| parse(&t)).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_points_types_and_hidepid_and_skips_junk() {
        let text = "22 1 0:21 / /proc rw,nosuid - proc proc rw,hidepid=invisible\n\
                    30 25 0:26 / /sys/fs/bpf rw,relatime shared:7 - bpf bpf rw,mode=700\n\
                    garbage line\n\
                    31 22 0:27 / /proc/x rw - proc proc rw,hidepid=0\n";
        let m = parse(text);
        assert_eq!(m.len(), 3);
        assert_eq!((m[1].mount_point.as_path(), m[1].fstype.as_str()), (Path::new("/sys/fs/bpf"), "bpf"));
        assert!(m[0].hides_pids() && !m[1].hides_pids() && !m[2].hides_pids());
    }
}
