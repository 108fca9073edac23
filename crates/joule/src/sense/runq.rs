//! Run-queue latency per cgroup and per-thread CPU wait, measured in the kernel by
//! runqlat.bpf.c, as a source. While it runs, telemetry's /proc task_wait source is dropped:
//! the kernel accounts waits as they happen, at a cost that grows with the tasks that run, not
//! with every thread on the machine.

use joule_bpf::RunqLat;
use joule_core::Snapshot;
use joule_telemetry::{Source, SourceError};

pub struct RunqSource {
    runq: RunqLat,
    /// How many of the longest-waiting threads to report.
    task_wait_top: usize,
}

impl RunqSource {
    pub fn new(runq: RunqLat, task_wait_top: usize) -> RunqSource {
        RunqSource { runq, task_wait_top }
    }
}

impl Source for RunqSource {
    fn name(&self) -> &'static str {
        "runq_latency"
    }
    fn sample(&mut self, snap: &mut Snapshot) -> Result<(), SourceError> {
        snap.runq_latency = self.runq.sample();
        snap.task_wait = self.runq.task_waits(self.task_wait_top);
        Ok(())
    }
}
