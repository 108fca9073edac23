//! RT throttling (`kernel.sched_rt_runtime_us` of `sched_rt_period_us`): left on by default —
//! it is what stops SCHED_FIFO targets from starving everything else on their core — and lifted
//! only behind `--no-rt-throttle`, journalled (`Undo::Write`) and told to the guardian first, so
//! it comes back on exit, on a crash and with `joule restore`.

use crate::engine::Elevator;
use crate::ElevateError;
use joule_core::effects::Effects;
use joule_core::journal::Undo;
use std::path::Path;

pub const RT_RUNTIME: &str = "/proc/sys/kernel/sched_rt_runtime_us";
pub const RT_PERIOD: &str = "/proc/sys/kernel/sched_rt_period_us";

/// The global RT bandwidth.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Throttle {
    /// -1: unlimited (throttling off).
    pub runtime_us: i64,
    pub period_us: i64,
}

impl Throttle {
    pub fn read(fx: &dyn Effects) -> Option<Throttle> {
        let num = |p: &str| fx.read(Path::new(p)).ok()?.trim().parse::<i64>().ok();
        Some(Throttle { runtime_us: num(RT_RUNTIME)?, period_us: num(RT_PERIOD)? })
    }

    pub fn is_on(&self) -> bool {
        self.runtime_us >= 0 && self.runtime_us < self.period_us
    }

    /// What throttling does to the targets' shares, in words.
    pub fn describe(&self) -> String {
        if !self.is_on() {
            return "RT throttling is off: the targets and the scheduler may hold their cores 100 %; ordinary tasks bound to those cores starve until the run ends".into();
        }
        let share = 100.0 * self.runtime_us as f64 / self.period_us as f64;
        let off_ms = (self.period_us - self.runtime_us) as f64 / 1000.0;
        format!(
            "RT throttling is on ({} of every {} µs): on each core the SCHED_FIFO threads stop for {off_ms:.0} ms of every {:.0} ms and ordinary tasks run, so the targets together get at most {share:.1} % of their core (the shares of the schedule apply within that); in the dedicated pattern the scheduler's core is throttled too, and for those {off_ms:.0} ms the target running keeps its core without switches. --no-rt-throttle lifts it for the run (restored on exit)",
            self.runtime_us,
            self.period_us,
            self.period_us as f64 / 1000.0
        )
    }
}

/// Lifts RT throttling for the elevator's lifetime: records the undo, then writes -1.
pub fn lift(el: &mut Elevator<'_>, fx: &dyn Effects) -> Result<Throttle, ElevateError> {
    let io = |what: &str, source| ElevateError::Io { what: format!("{what} {RT_RUNTIME}"), source };
    let old = fx.read(Path::new(RT_RUNTIME)).map_err(|e| io("reading", e))?;
    el.record(Undo::Write { path: RT_RUNTIME.into(), old: old.trim().to_string() })?;
    fx.write(Path::new(RT_RUNTIME), "-1").map_err(|e| io("writing -1 to", e))?;
    Throttle::read(fx).ok_or_else(|| ElevateError::Invalid(format!("{RT_RUNTIME} unreadable after writing")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_description_gives_the_share_and_the_stop() {
        let t = Throttle { runtime_us: 950_000, period_us: 1_000_000 };
        let d = t.describe();
        assert!(t.is_on() && d.contains("95.0 %") && d.contains("50 ms"), "{d}");
        assert!(!Throttle { runtime_us: -1, period_us: 1_000_000 }.is_on());
    }
}
