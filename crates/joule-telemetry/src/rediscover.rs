//! When a source lists its hardware again. Sysfs sensors, their names and trip points, RAPL
//! zones and the cgroup layout change rarely (hotplug, a module load, a remount), so sources
//! discover them on the first sample and again every [`REDISCOVER_MS`] of sampled time, or on
//! the sample after a read that says something is gone; in between they read only the values
//! (temperatures, power inputs, energy counters, usage files).

/// Sampled time between two discoveries.
pub(crate) const REDISCOVER_MS: u64 = 10_000;

#[derive(Debug, Default)]
pub(crate) struct Rediscover {
    /// Sampled time since the last discovery; `None` before the first or after `invalidate`.
    since_ms: Option<u64>,
}

impl Rediscover {
    /// Whether to discover on this sample, which covers `interval_ms`.
    pub(crate) fn due(&mut self, interval_ms: u64) -> bool {
        let since = self.since_ms.map(|s| s.saturating_add(interval_ms));
        let due = since.is_none_or(|s| s >= REDISCOVER_MS);
        self.since_ms = Some(if due { 0 } else { since.unwrap_or(0) });
        due
    }

    /// Discover again on the next sample (something read as gone).
    pub(crate) fn invalidate(&mut self) {
        self.since_ms = None;
    }
}

/// A read error that means the thing read is gone (unplugged, unloaded, unmounted), so what was
/// discovered is stale; EAGAIN/ENODATA of a firmware zone or EACCES are not.
pub(crate) fn gone(e: &std::io::Error) -> bool {
    e.kind() == std::io::ErrorKind::NotFound || e.raw_os_error() == Some(libc::ENODEV)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_then_every_ten_seconds_or_after_invalidate() {
        let mut r = Rediscover::default();
        assert!(r.due(0));
        assert!(!r.due(100));
        assert!(!r.due(REDISCOVER_MS - 200));
        assert!(r.due(100));
        assert!(!r.due(100));
        r.invalidate();
        assert!(r.due(100));
        assert!(!r.due(100));
    }
}
