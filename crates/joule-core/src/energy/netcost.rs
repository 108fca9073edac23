//! A network app's CPU demand from its flow state — the seed's point that a network app's cost
//! depends on the stack's state, not on its own thread's utilisation: at a given bandwidth,
//! the packet rate is `bandwidth / (8 × mean packet size)`, and most of the work is per packet
//! (driver, IP, TCP, in the NET_RX/NET_TX softirq, which the scheduler neither places nor
//! accounts to the app), plus a per-byte copy in the app's own thread (the syscall).
//!
//! ```text
//! packets/s         = bandwidth_bit/s / (8 × mean_packet_bytes)
//! softirq cycles/s  = packets/s × softirq_cycles_per_packet
//! app cycles/s      = packets/s × app_cycles_per_packet + bytes/s × app_cycles_per_byte
//! ```
//!
//! Cycles are reference cycles (see `energy`). The default coefficients are `model` values of
//! the right order, not a calibration of any machine: about 2.5 µs of softirq work per packet
//! on a 2 GHz core and a copy at one cycle per byte. Set them from a measurement (the flow
//! monitor's softirq time per packet) in `[energy.net_cost]`.

use serde::{Deserialize, Serialize};

/// What the flow monitor says of a class's traffic (or, until it says, the class's target).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct FlowState {
    pub bandwidth_mbit: f64,
    pub mean_packet_bytes: f64,
}

/// The coefficients (all labelled `model`).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct NetCost {
    pub softirq_cycles_per_packet: f64,
    pub app_cycles_per_packet: f64,
    pub app_cycles_per_byte: f64,
}

impl Default for NetCost {
    fn default() -> Self {
        NetCost { softirq_cycles_per_packet: 5000.0, app_cycles_per_packet: 1000.0, app_cycles_per_byte: 1.0 }
    }
}

/// The CPU work a flow state needs, reference cycles per second.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct NetDemand {
    pub packets_per_s: f64,
    pub app_cycles_per_s: f64,
    pub softirq_cycles_per_s: f64,
}

impl NetDemand {
    pub fn total_cycles_per_s(&self) -> f64 {
        self.app_cycles_per_s + self.softirq_cycles_per_s
    }
}

impl NetCost {
    pub fn demand(&self, f: &FlowState) -> NetDemand {
        let bytes_per_s = f.bandwidth_mbit.max(0.0) * 1e6 / 8.0;
        let packets_per_s = bytes_per_s / f.mean_packet_bytes.max(1.0);
        NetDemand {
            packets_per_s,
            app_cycles_per_s: packets_per_s * self.app_cycles_per_packet + bytes_per_s * self.app_cycles_per_byte,
            softirq_cycles_per_s: packets_per_s * self.softirq_cycles_per_packet,
        }
    }

    /// Reference cycles one megabit per second costs at this packet size (all work is linear
    /// in bandwidth at a fixed packet size).
    pub fn cycles_per_mbit(&self, mean_packet_bytes: f64) -> f64 {
        self.demand(&FlowState { bandwidth_mbit: 1.0, mean_packet_bytes }).total_cycles_per_s()
    }

    pub fn is_valid(&self) -> bool {
        [self.softirq_cycles_per_packet, self.app_cycles_per_packet, self.app_cycles_per_byte].iter().all(|v| v.is_finite() && *v >= 0.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_packets_cost_more_at_the_same_bandwidth_and_mostly_in_softirq() {
        let c = NetCost::default();
        let bulk = c.demand(&FlowState { bandwidth_mbit: 100.0, mean_packet_bytes: 1448.0 });
        assert!((bulk.packets_per_s - 12.5e6 / 1448.0).abs() < 1e-6);
        assert!((bulk.app_cycles_per_s - (bulk.packets_per_s * 1000.0 + 12.5e6)).abs() < 1e-3);
        let small = c.demand(&FlowState { bandwidth_mbit: 100.0, mean_packet_bytes: 128.0 });
        assert!(small.total_cycles_per_s() > 6.0 * bulk.total_cycles_per_s(), "{small:?} vs {bulk:?}");
        assert!(small.softirq_cycles_per_s > small.app_cycles_per_s, "what the scheduler does not see dominates");
        assert!((c.cycles_per_mbit(1448.0) * 100.0 - bulk.total_cycles_per_s()).abs() < 1e-3);
        assert_eq!(c.demand(&FlowState { bandwidth_mbit: -1.0, mean_packet_bytes: 0.0 }).packets_per_s, 0.0);
    }
}
