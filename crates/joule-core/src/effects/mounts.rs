//! Mounts: what filesystem a path is on, and mounting/unmounting the source-less pseudo
//! filesystems joule may need on a fresh machine (bpffs, tracefs; see `crate::mounts`).

use super::{not_found, FakeEffects, Files, RealEffects};
use std::io;
use std::path::Path;

/// statfs `f_type` of bpffs.
pub const BPF_FS_MAGIC: i64 = 0xcafe_4a11;
/// statfs `f_type` of tracefs.
pub const TRACEFS_MAGIC: i64 = 0x7472_6163;
/// statfs `f_type` of cgroup v1 and v2, sysfs and procfs: where joule's knobs live.
pub const CGROUP_SUPER_MAGIC: i64 = 0x0027_e0eb;
pub const CGROUP2_SUPER_MAGIC: i64 = 0x6367_7270;
pub const SYSFS_MAGIC: i64 = 0x6265_6572;
pub const PROC_SUPER_MAGIC: i64 = 0x9fa0;

/// A pseudo-filesystem joule may mount.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PseudoFs {
    /// bpffs: where BPF maps and programs are pinned so other processes find them.
    Bpf,
    /// tracefs: tracepoint ids for programs attached with `tracepoint/` (not `tp_btf/`).
    Tracefs,
}

impl PseudoFs {
    pub fn fstype(self) -> &'static str {
        match self {
            PseudoFs::Bpf => "bpf",
            PseudoFs::Tracefs => "tracefs",
        }
    }
    pub fn magic(self) -> i64 {
        match self {
            PseudoFs::Bpf => BPF_FS_MAGIC,
            PseudoFs::Tracefs => TRACEFS_MAGIC,
        }
    }
    pub(crate) fn from_magic(magic: i64) -> Option<Self> {
        [PseudoFs::Bpf, PseudoFs::Tracefs].into_iter().find(|f| f.magic() == magic)
    }
    /// Entries a freshly mounted filesystem of this type has by itself: bpffs shows the kernel's
    /// preloaded iterators (CONFIG_BPF_PRELOAD) as `maps.debug` and `progs.debug`.
    fn own_entries(self) -> &'static [&'static str] {
        match self {
            PseudoFs::Bpf => &["maps.debug", "progs.debug"],
            PseudoFs::Tracefs => &[],
        }
    }

    /// Whether `dir` holds nothing but what a fresh filesystem of this type holds by itself.
    pub fn is_empty<F: Files + ?Sized>(self, dir: &Path, fx: &F) -> io::Result<bool> {
        Ok(fx.list_dir(dir)?.iter().all(|n| self.own_entries().contains(&n.as_str())))
    }
}

pub trait Mounts {
    /// The type of the filesystem `path` is on (statfs `f_type`, e.g. [`BPF_FS_MAGIC`]).
    fn fs_magic(&self, path: &Path) -> io::Result<i64>;
    /// `path` with every symlink resolved (what a write to it would reach).
    fn resolve(&self, path: &Path) -> io::Result<std::path::PathBuf> {
        Ok(path.to_path_buf())
    }
    /// Mounts a fresh, source-less filesystem of `fstype` (`bpf`, `tracefs`) at `target`.
    fn mount(&self, fstype: &str, target: &Path) -> io::Result<()>;
    /// Unmounts whatever is mounted at `target` (not lazily: a busy mount stays and says so).
    fn unmount(&self, target: &Path) -> io::Result<()>;
}

impl Mounts for RealEffects {
    fn fs_magic(&self, path: &Path) -> io::Result<i64> {
        let st = nix::sys::statfs::statfs(path)?;
        Ok(st.filesystem_type().0 as i64)
    }
    fn resolve(&self, path: &Path) -> io::Result<std::path::PathBuf> {
        std::fs::canonicalize(path)
    }
    fn mount(&self, fstype: &str, target: &Path) -> io::Result<()> {
        use nix::mount::MsFlags;
        let flags = MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC;
        // Only root may enter what joule mounts (bpffs's root is 1777 by default: any user could
        // make a directory there and keep it mounted, or squat joule's pin dir; issue 33), as
        // systemd mounts bpffs.
        nix::mount::mount(Some(fstype), target, Some(fstype), flags, Some("mode=0700"))?;
        Ok(())
    }
    fn unmount(&self, target: &Path) -> io::Result<()> {
        nix::mount::umount(target)?;
        Ok(())
    }
}

/// The fake's filesystems: a path is on its longest mount, and everything else is on cgroup2
/// (most fake paths are cgroup knobs).
impl Mounts for FakeEffects {
    fn fs_magic(&self, path: &Path) -> io::Result<i64> {
        use super::Files;
        if !self.exists(path) {
            return Err(not_found(path.display()));
        }
        let mounts = self.mounts.lock().unwrap();
        // Unmounted paths are on what a machine has there: sysfs under /sys (cgroups below
        // /sys/fs/cgroup), procfs under /proc, and a cgroup filesystem anywhere else (tests'
        // cgroup roots).
        let default = if path.starts_with("/sys/fs/cgroup") {
            CGROUP2_SUPER_MAGIC
        } else if path.starts_with("/sys") {
            SYSFS_MAGIC
        } else if path.starts_with("/proc") {
            PROC_SUPER_MAGIC
        } else {
            CGROUP2_SUPER_MAGIC
        };
        Ok(mounts.iter().filter(|(m, _)| path.starts_with(m)).max_by_key(|(m, _)| m.as_os_str().len()).map_or(default, |(_, t)| *t))
    }
    fn mount(&self, fstype: &str, target: &Path) -> io::Result<()> {
        self.act(format!("mount {fstype} {}", target.display()), || {
            if !self.dirs.lock().unwrap().contains_key(target) {
                return Err(not_found(target.display()));
            }
            let magic = match fstype {
                "bpf" => BPF_FS_MAGIC,
                "tracefs" => TRACEFS_MAGIC,
                _ => return Err(io::Error::from_raw_os_error(libc::ENODEV)),
            };
            self.mounts.lock().unwrap().insert(target.to_path_buf(), magic);
            Ok(())
        })
    }
    fn unmount(&self, target: &Path) -> io::Result<()> {
        self.act(format!("umount {}", target.display()), || {
            self.mounts.lock().unwrap().remove(target).map(drop).ok_or_else(|| io::Error::from_raw_os_error(libc::EINVAL))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_path_is_on_its_longest_mount_and_unmounting_twice_is_einval() {
        let fx = FakeEffects::default().with_dir("/sys").with_dir("/sys/fs/bpf").with_file("/sys/fs/bpf/x", "");
        assert_eq!(fx.fs_magic(Path::new("/sys/fs/bpf/x")).unwrap(), SYSFS_MAGIC, "unmounted: sysfs, as on a machine");
        fx.mount("bpf", Path::new("/sys/fs/bpf")).unwrap();
        assert_eq!(fx.fs_magic(Path::new("/sys/fs/bpf/x")).unwrap(), BPF_FS_MAGIC);
        assert_eq!(fx.fs_magic(Path::new("/sys")).unwrap(), SYSFS_MAGIC);
        assert_eq!(fx.mount("ext4", Path::new("/sys")).unwrap_err().raw_os_error(), Some(libc::ENODEV));
        fx.unmount(Path::new("/sys/fs/bpf")).unwrap();
        assert_eq!(fx.unmount(Path::new("/sys/fs/bpf")).unwrap_err().raw_os_error(), Some(libc::EINVAL));
        assert_eq!(fx.calls(), vec!["mount bpf /sys/fs/bpf", "umount /sys/fs/bpf"]);
    }
}
