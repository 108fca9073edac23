//! `/proc/<pid>/mountinfo` parsed into what joule asks of it: where each filesystem is mounted,
//! its type and its superblock options (`hidepid`). Format: proc(5). Read as bytes: a user
//! mounts a FUSE filesystem (or a desktop a USB stick by its label) at a path of their naming,
//! and one byte of theirs that is not UTF-8 must not hide every other mount.

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

/// Parses mountinfo; lines it cannot read are skipped. Mount points are kept byte for byte,
/// with the kernel's octal escapes (`\040` for a space): joule only compares them with paths
/// it chose.
pub fn parse<B: AsRef<[u8]> + ?Sized>(bytes: &B) -> Vec<MountEntry> {
    use std::os::unix::ffi::OsStrExt;
    let words = |s: &'_ [u8]| s.split(|b| *b == b' ').filter(|w| !w.is_empty()).map(<[u8]>::to_vec).collect::<Vec<_>>();
    let text = |w: &[u8]| String::from_utf8_lossy(w).into_owned();
    bytes
        .as_ref()
        .split(|b| *b == b'\n')
        .filter_map(|l| {
            let sep = l.windows(3).position(|w| w == b" - ")?;
            let (left, right) = (words(&l[..sep]), words(&l[sep + 3..]));
            let mount_point = std::path::PathBuf::from(std::ffi::OsStr::from_bytes(left.get(4)?));
            let fstype = text(right.first()?);
            let super_options = right.get(2).map(|w| text(w)).unwrap_or_default();
            Some(MountEntry { mount_point, fstype, super_options })
        })
        .collect()
}

/// Reads and parses `path` (empty when unreadable).
pub fn read(path: &Path) -> Vec<MountEntry> {
    std::fs::read(path).map(|b| parse(&b)).unwrap_or_default()
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

    /// A user's FUSE mount at a path that is not UTF-8 (fusermount is setuid) hides nothing.
    #[test]
    fn a_mount_point_that_is_not_utf8_hides_no_other_mount() {
        use std::os::unix::ffi::OsStrExt;
        let text = b"40 25 0:50 / /home/u/\xff\xfe rw,nosuid - fuse.sshfs u@h:/ rw,user_id=1001\n\
                     22 1 0:21 / /proc rw,nosuid - proc proc rw,hidepid=invisible\n";
        let m = parse(text);
        assert_eq!(m.len(), 2);
        assert_eq!(m[0].mount_point.as_os_str().as_bytes(), b"/home/u/\xff\xfe");
        assert!(m[1].mount_point == Path::new("/proc") && m[1].hides_pids());
    }
}
