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

/// The top-level section around byte `at` of `text`: its name (`agent`, `class`, `class.match`;
/// "" for keys before any header) and the byte range from its header to the next header.
/// Line-based, so it works on text the parser refused for its syntax.
pub(super) fn section_around(text: &str, at: usize) -> (String, std::ops::Range<usize>) {
    let mut start = 0;
    let mut name = String::new();
    let mut offset = 0;
    let mut end = text.len();
    for line in text.split_inclusive('\n') {
        let broken_header = line.trim_start().starts_with('[') && header(line).is_none();
        if offset <= at && at < offset + line.len() && broken_header {
            // The mistake is a header itself: set aside from it to the next header.
            start = offset;
            name = line.trim().to_string();
        } else if let Some(h) = header(line) {
            if offset > at {
                end = offset;
                break;
            }
            start = offset;
            name = h;
        }
        offset += line.len();
    }
    if name.is_empty() {
        // A key before any header: only its own line.
        let s = text[..at.min(text.len())].rfind('\n').map_or(0, |i| i + 1);
        let e = text[at.min(text.len())..].find('\n').map_or(text.len(), |i| at + i + 1);
        return (name, s..e);
    }
    (name, start..end)
}

/// The table name of a header line (`[agent]`, `[[class]]`, `[class.match]`), if it is one.
fn header(line: &str) -> Option<String> {
    let l = line.trim();
    let l = l.split_once('#').map_or(l, |(h, _)| h.trim_end());
    let inner = l.strip_prefix("[[").and_then(|r| r.strip_suffix("]]")).or_else(|| l.strip_prefix('[').and_then(|r| r.strip_suffix(']')))?;
    let inner = inner.trim();
    (!inner.is_empty() && inner.chars().all(|c| c.is_ascii_alphanumeric() || "_-.\"' ".contains(c))).then(|| inner.to_string())
}

/// Replaces `range` of `text` with spaces, keeping its newlines (line numbers stay).
pub(super) fn blank(text: &mut String, range: std::ops::Range<usize>) {
    let blanked: String = text[range.clone()].chars().map(|c| if c == '\n' { '\n' } else { ' ' }).collect();
    text.replace_range(range, &blanked);
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
    fn the_rest_period_defaults_to_two_seconds_and_is_never_shorter_than_the_period() {
        assert_eq!(Config::parse("").unwrap().agent.rest_period_ms(), 2000);
        assert_eq!(Config::parse("[agent]\nperiod_ms = 3000\n").unwrap().agent.rest_period_ms(), 3000, "unset: the period when longer");
        assert_eq!(Config::parse("[agent]\nrest_period_ms = 1500\n").unwrap().agent.rest_period_ms(), 1500);
        for bad in ["[agent]\nrest_period_ms = 50\n", "[agent]\nrest_period_ms = 60001\n"] {
            let e = Config::parse(bad).unwrap_err();
            assert!(e.iter().any(|p| p.key.as_deref() == Some("agent.rest_period_ms") && p.line == Some(2)), "{e:#?}");
        }
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
    fn three_independent_mistakes_give_three_problems_with_their_lines() {
        let text = "[agent]\nperiod_ms = \"fast\"\n\n[telemetry]\nbpf_pin_dri = \"/x\"\n\n[[class]]\nname = \"a\"\nweight = 0\n\n[thermal]\nhysteresis_celsius = -1.0\n";
        let e = Config::parse(text).unwrap_err();
        let lines: Vec<Option<usize>> = e.iter().map(|p| p.line).collect();
        assert_eq!(lines, [Some(2), Some(5), Some(9), Some(12)], "{e:#?}");
        assert!(e[0].message.contains("invalid type") && e[1].message.contains("bpf_pin_dri") && e[2].message.contains("weight = 0"), "{e:#?}");
    }

    #[test]
    fn a_syntax_error_in_one_section_leaves_the_others_checked() {
        let text = "[agent]\nperiod_ms = 5\n\n[nap\nenabled = true\n";
        let e = Config::parse(text).unwrap_err();
        assert!(e.iter().any(|p| p.line == Some(4)), "{e:#?}");
        assert!(e.iter().any(|p| p.key.as_deref() == Some("agent.period_ms") && p.line == Some(2)), "{e:#?}");
    }

    #[test]
    fn a_bad_top_level_key_does_not_hide_the_sections_problems() {
        let e = Config::parse("colour = 1\n[agent]\nperiod_ms = 5\n").unwrap_err();
        assert!(e.iter().any(|p| p.line == Some(1)) && e.iter().any(|p| p.key.as_deref() == Some("agent.period_ms")), "{e:#?}");
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
