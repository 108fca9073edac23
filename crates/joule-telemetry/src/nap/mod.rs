//! The nap source: runs the `[nap.monitors]` each period into `snap.nap`, with what the nap
//! actuator reports back (napping, wakes, eBPF port hits). It never decides; `policy/nap.rs`
//! does.

mod monitors;

pub use monitors::{interrupts, Activity, BlockIo, Console, CpuLoad, Interface, Monitor, Processes, TcpPorts, UdpPorts};

use crate::{Source, SourceError};
use joule_core::config::NapMonitors;
use joule_core::nap::NapCounters;
use joule_core::snapshot::{MonitorReading, NapReadings};
use joule_core::{Origin, Snapshot};
use std::path::Path;
use std::sync::Arc;

/// Every monitor the config turns on, in a fixed order.
pub fn monitors(m: &NapMonitors, procfs: &Path, sysfs: &Path, counters: &Arc<NapCounters>) -> Vec<Box<dyn Monitor>> {
    let mut out: Vec<Box<dyn Monitor>> = Vec::new();
    if !m.tcp_ports.is_empty() {
        out.push(Box::new(TcpPorts { procfs: procfs.into(), ports: m.tcp_ports.clone(), counters: Some(counters.clone()) }));
    }
    if !m.udp_ports.is_empty() {
        out.push(Box::new(UdpPorts { procfs: procfs.into(), ports: m.udp_ports.clone() }));
    }
    if !m.processes.is_empty() {
        out.push(Box::new(Processes { procfs: procfs.into(), names: m.processes.clone(), uids: m.process_uids.clone() }));
    }
    if let Some(pct) = m.cpu_load_pct {
        out.push(Box::new(CpuLoad::new(procfs.into(), pct)));
    }
    if m.block_io {
        out.push(Box::new(BlockIo::new(procfs.into())));
    }
    if !m.console_irqs.is_empty() {
        out.push(Box::new(Console::new(procfs.into(), m.console_irqs.clone())));
    }
    if let Some(i) = &m.interface {
        out.push(Box::new(Interface::new(sysfs.into(), i.clone())));
    }
    out
}

pub struct NapSource {
    monitors: Vec<Box<dyn Monitor>>,
    counters: Arc<NapCounters>,
}

impl NapSource {
    pub fn new(monitors: Vec<Box<dyn Monitor>>, counters: Arc<NapCounters>) -> Self {
        Self { monitors, counters }
    }
}

impl Source for NapSource {
    fn name(&self) -> &'static str {
        "nap"
    }
    fn sample(&mut self, snap: &mut Snapshot) -> Result<(), SourceError> {
        let mut r = NapReadings {
            napping: self.counters.napping(),
            wakes_total: self.counters.wakes_total(),
            port_hits_total: self.counters.port_hits_total(),
            monitors: Vec::with_capacity(self.monitors.len()),
        };
        for m in &mut self.monitors {
            // A monitor that cannot read says so and counts as active: never nap on a guess.
            let (active, detail) = match m.poll() {
                Ok(a) => (a.active, a.detail),
                Err(e) => (true, format!("cannot read: {e}")),
            };
            r.monitors.push(MonitorReading { name: m.name().into(), active, detail, source: Origin::Kernel });
        }
        snap.nap = Some(r);
        Ok(())
    }
}
