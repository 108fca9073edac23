//! The two ways every crate reads a small kernel text file: a one-value file trimmed (sysfs,
//! cgroup knobs, sysctls) and one key of a `key value` file (cgroup `cpu.stat`). Through
//! `Effects`, so the callers' tests can use fakes; callers that read the machine directly pass
//! `&RealEffects`.

use crate::effects::Effects;
use std::io;
use std::path::Path;

/// A one-value file (sysfs `name`, `cpuset.cpus`, `sched_rt_runtime_us`), without the
/// surrounding whitespace and newline.
pub fn read_trimmed(fx: &dyn Effects, path: &Path) -> io::Result<String> {
    Ok(fx.read(path)?.trim().to_string())
}

/// A whole text file an admin names (the config, an energy model): a regular file of at most
/// `max_bytes`, read without following it past that size (`/dev/zero`, a FIFO or a 10 GB file
/// is refused, not read into memory).
pub fn read_file_capped(path: &Path, max_bytes: u64) -> io::Result<String> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let f = std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NONBLOCK).open(path)?;
    let md = f.metadata()?;
    if !md.is_file() {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("{} is not a regular file", path.display())));
    }
    if md.len() > max_bytes {
        return Err(io::Error::new(io::ErrorKind::InvalidData, format!("{} is {} bytes; joule reads at most {max_bytes}", path.display(), md.len())));
    }
    let mut text = String::new();
    f.take(max_bytes + 1).read_to_string(&mut text)?;
    if text.len() as u64 > max_bytes {
        return Err(io::Error::new(io::ErrorKind::InvalidData, format!("{} grew past {max_bytes} bytes while read", path.display())));
    }
    Ok(text)
}

/// The value of `key` in `key value` lines (cgroup `cpu.stat`, `memory.stat`), if present and
/// a number. The key must match whole: `throttled` does not find `throttled_usec`.
pub fn keyed_u64(text: &str, key: &str) -> Option<u64> {
    text.lines().find_map(|l| {
        let mut it = l.split_ascii_whitespace();
        (it.next()? == key).then(|| it.next()?.parse().ok()).flatten()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::effects::FakeEffects;

    #[test]
    fn trimmed_value_and_missing_file() {
        let fx = FakeEffects::default().with_file("/sys/x/name", "  coretemp \n");
        assert_eq!(read_trimmed(&fx, Path::new("/sys/x/name")).unwrap(), "coretemp");
        assert_eq!(read_trimmed(&fx, Path::new("/sys/x/gone")).unwrap_err().kind(), io::ErrorKind::NotFound);
    }

    #[test]
    fn capped_reads_refuse_devices_and_big_files() {
        let e = read_file_capped(Path::new("/dev/zero"), 1024).unwrap_err();
        assert!(e.to_string().contains("not a regular file"), "{e}");
        let t = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(t.path(), vec![b'a'; 2048]).unwrap();
        assert!(read_file_capped(t.path(), 1024).unwrap_err().to_string().contains("2048 bytes; joule reads at most 1024"));
        assert_eq!(read_file_capped(t.path(), 4096).unwrap().len(), 2048);
    }

    #[test]
    fn keyed_u64_finds_exact_key_only() {
        let t = "nr_periods 3\nnr_throttled 2\nthrottled_time 500\nthrottled_usec 7\nbad x\n";
        assert_eq!(keyed_u64(t, "nr_throttled"), Some(2));
        assert_eq!(keyed_u64(t, "throttled_time"), Some(500));
        assert_eq!(keyed_u64(t, "throttled"), None);
        assert_eq!(keyed_u64(t, "bad"), None);
    }
}
