//! The `placement` section of `joule bench net-qos` (energy-aware placement on the XU4 model):
//! written by the energy half of issue 11. This placeholder stands in on the network branch
//! until the two are merged.

use super::NetQosArgs;

pub fn run(_args: &NetQosArgs) -> anyhow::Result<Vec<serde_json::Value>> {
    anyhow::bail!("placement section: not merged yet")
}
