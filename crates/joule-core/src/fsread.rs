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
    fn keyed_u64_finds_exact_key_only() {
        let t = "nr_periods 3\nnr_throttled 2\nthrottled_time 500\nthrottled_usec 7\nbad x\n";
        assert_eq!(keyed_u64(t, "nr_throttled"), Some(2));
        assert_eq!(keyed_u64(t, "throttled_time"), Some(500));
        assert_eq!(keyed_u64(t, "throttled"), None);
        assert_eq!(keyed_u64(t, "bad"), None);
    }
}
