//! The log's setup: tracing to stderr, colours only on a terminal, and every field of every
//! line — the message too — with its control characters escaped as joule's text views escape
//! them (`joule_core::text`). Log lines quote names the machine's users chose (a thread, a
//! cgroup, a unit); tracing's own guard leaves CR, newlines and most of C0 raw, so a name could
//! still overwrite or forge a line where root reads the log (a terminal, `journalctl -a`).

use joule_core::text::Escaped;
use tracing_subscriber::field::MakeExt;

/// Logs at `filter` (tracing's RUST_LOG syntax; `info` when it does not parse) to stderr.
pub fn init(filter: &str) {
    let filter = tracing_subscriber::EnvFilter::try_new(filter).unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).with_target(false).with_ansi(ansi).fmt_fields(fields()).init();
}

/// How a line's fields are written: the message as it is, the others `name=value`, each
/// escaped.
fn fields() -> impl for<'w> tracing_subscriber::fmt::FormatFields<'w> + Send + Sync + 'static {
    tracing_subscriber::fmt::format::debug_fn(|w, field, value| {
        let text = format!("{value:?}");
        if field.name() == "message" {
            write!(w, "{}", Escaped(&text))
        } else {
            write!(w, "{}={}", field.name(), Escaped(&text))
        }
    })
    .delimited(" ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    #[derive(Clone, Default)]
    struct Buf(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Buf {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// A name with a title sequence, a carriage return that would overwrite the line, a
    /// shift-out that switches the terminal's character set, and a newline forging a line.
    #[test]
    fn a_log_line_shows_a_names_controls_escaped() {
        let buf = Buf::default();
        let out = buf.clone();
        let sub = tracing_subscriber::fmt().with_writer(move || out.clone()).with_ansi(false).with_target(false).fmt_fields(fields()).finish();
        tracing::subscriber::with_default(sub, || {
            let comm = "\x1b]2;owned\x07";
            tracing::warn!(comm = %comm, pid = 7, "moving {}: \r\x0egone\nERROR forged", "\u{9b}2J");
        });
        let line = String::from_utf8(buf.0.lock().unwrap().clone()).unwrap();
        assert_eq!(line.matches('\n').count(), 1, "one line: {line:?}");
        assert!(!line.trim_end_matches('\n').chars().any(char::is_control), "{line:?}");
        assert!(line.contains("moving \\u{9b}2J: \\r\\x0egone\\nERROR forged comm=\\x1b]2;owned\\x07 pid=7"), "{line:?}");
    }
}
