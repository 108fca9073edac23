//! Maps a problem back to the line of the config it came from, using toml_edit's spans, so
//! `joule check-config` can say "line 12: ..." for semantic errors as well as syntax errors.

use serde::Serialize;
use std::path::Path;

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Problem {
    /// 1-based line, when it could be located.
    pub line: Option<usize>,
    /// Dotted key path (`thermal.hysteresis_celsius`, `class[1].name`), when known.
    pub key: Option<String>,
    pub message: String,
    pub hint: String,
}

impl Problem {
    pub fn display_with(&self, path: &Path) -> String {
        let at = match self.line {
            Some(l) => format!("{}:{l}", path.display()),
            None => path.display().to_string(),
        };
        let hint = if self.hint.is_empty() { String::new() } else { format!(" (hint: {})", self.hint) };
        format!("{at}: {}{hint}", self.message)
    }
}

fn line_of(text: &str, byte: usize) -> usize {
    text[..byte.min(text.len())].bytes().filter(|&b| b == b'\n').count() + 1
}

pub(super) fn from_toml_error(text: &str, e: &toml::de::Error) -> Problem {
    let hint = if e.message().contains("unknown field") { "unknown keys are errors; see deploy/joule.toml for every key".to_string() } else { String::new() };
    Problem { line: e.span().map(|s| line_of(text, s.start)), key: None, message: e.message().trim().to_string(), hint }
}

pub(super) fn at_key(text: &str, key: &str, message: String, hint: String) -> Problem {
    Problem { line: span_of(text, key).map(|b| line_of(text, b)), key: Some(key.to_string()), message, hint }
}

/// Byte offset of the value at a dotted key path such as `class[1].match.comm`; falls back to
/// the nearest enclosing table that exists.
fn span_of(text: &str, key: &str) -> Option<usize> {
    let doc = toml_edit::ImDocument::parse(text).ok()?;
    let mut item: &toml_edit::Item = doc.as_item();
    let mut best = None;
    for part in key.split('.') {
        let (name, index) = match part.split_once('[') {
            Some((n, rest)) => (n, rest.trim_end_matches(']').parse::<usize>().ok()),
            None => (part, None),
        };
        let Some(next) = item.get(name) else { break };
        item = next;
        if let Some(i) = index {
            let Some(next) = item.get(i) else { break };
            item = next;
        }
        if let Some(s) = item.span() {
            best = Some(s.start);
        } else if let Some(t) = item.as_table() {
            best = t.span().map(|s| s.start).or(best);
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use crate::config::Config;

    #[test]
    fn unknown_key_is_an_error_with_its_line() {
        let e = Config::parse("[agent]\nperiod_ms = 100\nperiod_sm = 5\n").unwrap_err();
        assert_eq!(e.len(), 1);
        assert_eq!(e[0].line, Some(3));
        assert!(e[0].message.contains("period_sm"), "{:?}", e[0]);
    }

    #[test]
    fn semantic_errors_carry_the_line_of_their_key() {
        let text = "[agent]\nperiod_ms = 5\n\n[thermal]\nstage_thresholds_celsius = [80.0, 70.0]\n";
        let e = Config::parse(text).unwrap_err();
        let lines: Vec<_> = e.iter().map(|p| (p.key.clone().unwrap(), p.line)).collect();
        assert!(lines.contains(&("agent.period_ms".into(), Some(2))), "{lines:?}");
        assert!(lines.contains(&("thermal.stage_thresholds_celsius".into(), Some(5))), "{lines:?}");
    }

    #[test]
    fn class_problems_point_into_the_right_array_entry() {
        let text = "[[class]]\nname = \"a\"\n\n[[class]]\nname = \"a\"\n";
        let e = Config::parse(text).unwrap_err();
        assert_eq!(e[0].key.as_deref(), Some("class[1].name"));
        assert_eq!(e[0].line, Some(5));
    }

    #[test]
    fn empty_file_is_the_default_config() {
        assert_eq!(Config::parse("").unwrap(), Config::default());
    }

    #[test]
    fn shipped_default_config_is_valid() {
        let text = include_str!("../../../../deploy/joule.toml");
        Config::parse(text).unwrap_or_else(|e| panic!("deploy/joule.toml: {e:?}"));
    }
}
