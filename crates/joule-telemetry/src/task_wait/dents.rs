//! Thin, allocation-free access to procfs directories: `openat` relative to a directory fd and
//! `getdents64` into a caller-owned buffer. std's `read_dir` allocates per entry, which at 10 Hz
//! over thousands of threads is the bulk of the cost of the task-wait source.

use std::ffi::CStr;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// Opens `path` (NUL-terminated, relative to `dirfd`) read-only.
pub(crate) fn open_at(dirfd: RawFd, path: &CStr, directory: bool) -> io::Result<OwnedFd> {
    let flags = libc::O_RDONLY | libc::O_CLOEXEC | if directory { libc::O_DIRECTORY } else { 0 };
    // SAFETY: `path` is a valid C string; the returned fd is owned by nobody else.
    let fd = unsafe { libc::openat(dirfd, path.as_ptr(), flags) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fd is a fresh, valid descriptor.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Reads up to `buf.len()` bytes from offset 0 of an open file.
pub(crate) fn read_at0(fd: &OwnedFd, buf: &mut [u8]) -> io::Result<usize> {
    // SAFETY: buf is valid for writes of its length.
    let n = unsafe { libc::pread(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(n as usize)
}

/// Calls `f` with the name of every entry of the directory `fd` (from its start), using `buf`
/// for the kernel's records. `.` and `..` are included; callers filter by name.
pub(crate) fn for_each_name(fd: &OwnedFd, buf: &mut [u8], mut f: impl FnMut(&[u8])) -> io::Result<()> {
    // SAFETY: plain syscalls on a descriptor we own, into a buffer valid for its length.
    unsafe {
        if libc::lseek(fd.as_raw_fd(), 0, libc::SEEK_SET) < 0 {
            return Err(io::Error::last_os_error());
        }
    }
    loop {
        // SAFETY: the kernel writes at most buf.len() bytes into the buffer we own.
        let n = unsafe { libc::syscall(libc::SYS_getdents64, fd.as_raw_fd(), buf.as_mut_ptr(), buf.len()) };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        if n == 0 {
            return Ok(());
        }
        let mut off = 0usize;
        let n = n as usize;
        // struct linux_dirent64 { u64 d_ino; i64 d_off; u16 d_reclen; u8 d_type; char d_name[]; }
        while off + 19 <= n {
            let reclen = u16::from_ne_bytes([buf[off + 16], buf[off + 17]]) as usize;
            if reclen == 0 {
                break;
            }
            let name = &buf[off + 19..(off + reclen).min(n)];
            let len = name.iter().position(|&b| b == 0).unwrap_or(name.len());
            f(&name[..len]);
            off += reclen;
        }
    }
}

/// Parses an all-digit byte string (a pid/tid directory name); `None` for anything else.
pub(crate) fn parse_digits(s: &[u8]) -> Option<u64> {
    if s.is_empty() || s.len() > 19 {
        return None;
    }
    s.iter().try_fold(0u64, |acc, &b| b.is_ascii_digit().then(|| acc * 10 + u64::from(b - b'0')))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_names_of_a_directory_twice() {
        let t = tempfile::tempdir().unwrap();
        for n in ["1", "22", "abc"] {
            std::fs::write(t.path().join(n), "").unwrap();
        }
        let root = std::ffi::CString::new(t.path().as_os_str().as_encoded_bytes()).unwrap();
        let fd = open_at(libc::AT_FDCWD, &root, true).unwrap();
        let mut buf = vec![0u8; 4096];
        for _ in 0..2 {
            let mut names = Vec::new();
            for_each_name(&fd, &mut buf, |n| names.push(String::from_utf8_lossy(n).into_owned())).unwrap();
            names.sort();
            assert_eq!(names, [".", "..", "1", "22", "abc"]);
        }
    }

    #[test]
    fn digits_only() {
        assert_eq!(parse_digits(b"4321"), Some(4321));
        assert_eq!(parse_digits(b"self"), None);
        assert_eq!(parse_digits(b""), None);
    }
}
