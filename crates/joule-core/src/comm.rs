//! A task's name (`comm`) as the kernel keeps it: bytes that its owner chose, which need not be
//! UTF-8 (`prctl(PR_SET_NAME, "\xff\xfe…")`) and may hold control characters. joule keeps the
//! bytes exactly, so a name is matched as the kernel has it (a `comm` rule is text, so a name
//! that is not UTF-8 matches none, and nothing else about the task is lost with it), and shows
//! it only through [`Comm`]'s `Display`, which escapes what a terminal would act on.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::borrow::Cow;
use std::fmt;

/// A task's name, byte for byte.
#[derive(Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Comm(Vec<u8>);

impl Comm {
    pub fn new(bytes: impl Into<Vec<u8>>) -> Comm {
        Comm(bytes.into())
    }

    /// The name up to its first NUL, as the kernel pads `comm[16]` in a BPF event or map.
    pub fn from_nul_padded(raw: &[u8]) -> Comm {
        Comm(raw.iter().copied().take_while(|b| *b != 0).collect())
    }

    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    /// The name as text, when it is UTF-8 (what a `comm` rule can equal).
    pub fn as_str(&self) -> Option<&str> {
        std::str::from_utf8(&self.0).ok()
    }

    /// The name as text for machine-readable output (JSON, a metric's label), whose encoders
    /// escape control characters themselves: UTF-8 as it is, each byte that is not spelled
    /// `\xNN`.
    pub fn text(&self) -> Cow<'_, str> {
        match self.as_str() {
            Some(s) => Cow::Borrowed(s),
            None => Cow::Owned(spell(&self.0)),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// `bytes` as text: valid UTF-8 kept, each byte that is not spelled `\xNN`.
fn spell(bytes: &[u8]) -> String {
    use std::fmt::Write;
    let mut out = String::with_capacity(bytes.len());
    for chunk in bytes.utf8_chunks() {
        out.push_str(chunk.valid());
        for b in chunk.invalid() {
            let _ = write!(out, "\\x{b:02x}");
        }
    }
    out
}

/// For people: a terminal never receives a control character or a byte that is not UTF-8 from
/// a name another user chose.
impl fmt::Display for Comm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(&crate::text::EscapedBytes(&self.0).to_string())
    }
}

impl fmt::Debug for Comm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Comm(\"{}\")", crate::text::EscapedBytes(&self.0))
    }
}

impl From<&str> for Comm {
    fn from(s: &str) -> Comm {
        Comm(s.as_bytes().to_vec())
    }
}

impl From<String> for Comm {
    fn from(s: String) -> Comm {
        Comm(s.into_bytes())
    }
}

impl PartialEq<str> for Comm {
    fn eq(&self, other: &str) -> bool {
        self.0 == other.as_bytes()
    }
}

impl PartialEq<&str> for Comm {
    fn eq(&self, other: &&str) -> bool {
        self.0 == other.as_bytes()
    }
}

/// As [`Comm::text`]: JSON strings are Unicode, so a name that is not UTF-8 reads back as its
/// spelling, not its bytes.
impl Serialize for Comm {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.text())
    }
}

impl<'de> Deserialize<'de> for Comm {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Comm, D::Error> {
        String::deserialize(d).map(Comm::from)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_are_kept_and_text_only_when_utf8() {
        let c = Comm::new(b"\xff\xfeaudjx".to_vec());
        assert_eq!(c.as_bytes(), b"\xff\xfeaudjx");
        assert_eq!(c.as_str(), None);
        assert_eq!(c.text(), "\\xff\\xfeaudjx");
        assert_ne!(c, *"\u{fffd}\u{fffd}audjx", "never equal to its lossy form");
        assert_eq!(Comm::from("nginx").as_str(), Some("nginx"));
        assert_eq!(Comm::from_nul_padded(b"ab\0\0junk"), "ab");
        assert_eq!(Comm::from_nul_padded(b"fifteen-bytes!!"), "fifteen-bytes!!", "no NUL: all of it");
    }

    #[test]
    fn display_escapes_what_a_terminal_acts_on_and_keeps_the_rest() {
        let osc = Comm::from("\x1b]2;owned\x07");
        assert_eq!(osc.to_string(), "\\x1b]2;owned\\x07");
        assert_eq!(Comm::from("a\u{9b}b\x7f").to_string(), "a\\u{9b}b\\x7f");
        assert_eq!(Comm::new(b"caf\xc3\xa9 \xff".to_vec()).to_string(), "café \\xff");
        assert_eq!(format!("{:<6}|", Comm::from("ab")), "ab    |", "padding applies");
        assert_eq!(osc.text(), "\x1b]2;owned\x07", "machine output keeps the text; its encoder escapes");
        assert_eq!(serde_json::to_string(&osc).unwrap(), r#""\u001b]2;owned\u0007""#);
        assert_eq!(serde_json::from_str::<Comm>(r#""x\u001b""#).unwrap(), Comm::from("x\x1b"));
    }
}
