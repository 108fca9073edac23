//! `telemetry.bpf`: whether the agent loads its eBPF programs. `"auto"` (the default) loads
//! them where the kernel allows it and runs without them, saying why, where it does not (no
//! BTF, no CAP_BPF, a verifier refusal); `true` requires them (the agent refuses to start
//! without); `false` never loads them.

use serde::de::{self, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum BpfMode {
    /// Load where the kernel allows it; otherwise run without, with the reason.
    #[default]
    Auto,
    /// Load or refuse to start (`true`): for operators who rely on what only eBPF gives.
    Required,
    /// Never load (`false`).
    Off,
}

impl Serialize for BpfMode {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            BpfMode::Auto => s.serialize_str("auto"),
            BpfMode::Required => s.serialize_bool(true),
            BpfMode::Off => s.serialize_bool(false),
        }
    }
}

struct ModeVisitor;

impl Visitor<'_> for ModeVisitor {
    type Value = BpfMode;
    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("true, false or \"auto\"")
    }
    fn visit_bool<E: de::Error>(self, v: bool) -> Result<BpfMode, E> {
        Ok(if v { BpfMode::Required } else { BpfMode::Off })
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<BpfMode, E> {
        match v {
            "auto" => Ok(BpfMode::Auto),
            other => Err(E::custom(format!("bpf must be true, false or \"auto\", not {other:?}"))),
        }
    }
}

impl<'de> Deserialize<'de> for BpfMode {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<BpfMode, D::Error> {
        d.deserialize_any(ModeVisitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Deserialize, Serialize)]
    struct T {
        bpf: BpfMode,
    }

    #[test]
    fn bpf_takes_a_bool_or_auto_and_names_anything_else() {
        for (text, want) in [("true", BpfMode::Required), ("false", BpfMode::Off), ("\"auto\"", BpfMode::Auto)] {
            let t: T = toml::from_str(&format!("bpf = {text}")).unwrap();
            assert_eq!(t.bpf, want, "{text}");
            assert_eq!(toml::to_string(&t).unwrap().trim(), format!("bpf = {text}"), "written back as it is spelt");
        }
        for bad in ["\"yes\"", "1", "\"Auto\""] {
            let e = toml::from_str::<T>(&format!("bpf = {bad}")).unwrap_err().to_string();
            assert!(e.contains("true, false or \"auto\""), "{bad}: {e}");
        }
        let e = toml::from_str::<T>("bpf = \"yes\"").unwrap_err().to_string();
        assert!(e.contains("\"yes\""), "{e}");
    }
}
