//! Strings that came from the machine — a thread's name, a cgroup, unit or pod name, a reason
//! or an error that quotes one — made safe to print where root reads them. Any user chooses
//! their threads' names, so a name can hold a terminal's escape sequences (`ESC ] 2 ; … BEL`
//! sets the window title, OSC 52 writes the clipboard where allowed, a C1 `CSI` moves the
//! cursor): every text view shows control characters escaped and keeps everything else, and
//! JSON for a terminal escapes the controls serde leaves raw (DEL and C1).

use std::borrow::Cow;
use std::fmt;
use std::io;

/// A control character: C0 (ESC, BEL, CR, newline …), DEL and C1 (U+0080–U+009F, where an
/// 8-bit terminal reads `CSI`, `OSC` and `ST`).
fn is_control(c: char) -> bool {
    c.is_control()
}

fn write_escaped_char(f: &mut impl fmt::Write, c: char) -> fmt::Result {
    match c {
        '\n' => f.write_str("\\n"),
        '\r' => f.write_str("\\r"),
        '\t' => f.write_str("\\t"),
        c if (c as u32) < 0x80 => write!(f, "\\x{:02x}", c as u32),
        c => write!(f, "\\u{{{:x}}}", c as u32),
    }
}

fn write_escaped(f: &mut impl fmt::Write, s: &str, keep_newlines: bool) -> fmt::Result {
    let mut rest = s;
    while let Some((i, c)) = rest.char_indices().find(|&(_, c)| is_control(c) && !(keep_newlines && c == '\n')) {
        f.write_str(&rest[..i])?;
        write_escaped_char(f, c)?;
        rest = &rest[i + c.len_utf8()..];
    }
    f.write_str(rest)
}

/// `s` with every control character escaped (`\x1b`, `\x07`, `\n`, `\u{9b}`) and everything
/// else as it is: borrowed when there is nothing to escape, so the common case costs a scan.
pub fn escape(s: &str) -> Cow<'_, str> {
    if !s.chars().any(is_control) {
        return Cow::Borrowed(s);
    }
    Cow::Owned(Escaped(s).to_string())
}

/// A text of several lines (a whole report) with every control character but the newlines
/// escaped: the last guard before a text view's lines reach stdout or stderr.
pub fn escape_lines(s: &str) -> Cow<'_, str> {
    if !s.chars().any(|c| is_control(c) && c != '\n') {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 16);
    let _ = write_escaped(&mut out, s, true);
    Cow::Owned(out)
}

/// [`escape`] as a `Display`, for a `format!` or a type's own `Display` without a copy:
/// `write!(f, "{}", Escaped(name))`.
#[derive(Debug, Clone, Copy)]
pub struct Escaped<'a>(pub &'a str);

impl fmt::Display for Escaped<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_escaped(f, self.0, false)
    }
}

/// Bytes that need not be UTF-8 (a name as /proc holds it) as [`Escaped`] text: valid UTF-8
/// escaped as `Escaped` does, each byte that is not as `\xff`, so two different names never
/// print alike through a replacement character.
#[derive(Debug, Clone, Copy)]
pub struct EscapedBytes<'a>(pub &'a [u8]);

impl fmt::Display for EscapedBytes<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for chunk in self.0.utf8_chunks() {
            write_escaped(f, chunk.valid(), false)?;
            for b in chunk.invalid() {
                write!(f, "\\x{b:02x}")?;
            }
        }
        Ok(())
    }
}

/// `v` as JSON that is safe on a terminal: serde_json escapes C0 controls but writes DEL and
/// C1 raw, so those are written `\u007f` … `\u009f` too. The document parses to the same
/// value. `pretty`: indented, as `serde_json::to_string_pretty`.
pub fn to_json<T: serde::Serialize + ?Sized>(v: &T, pretty: bool) -> serde_json::Result<String> {
    let mut out = Vec::new();
    if pretty {
        v.serialize(&mut serde_json::Serializer::with_formatter(&mut out, TerminalSafe(serde_json::ser::PrettyFormatter::new())))?;
    } else {
        v.serialize(&mut serde_json::Serializer::with_formatter(&mut out, TerminalSafe(serde_json::ser::CompactFormatter)))?;
    }
    // serde_json writes UTF-8 only.
    Ok(String::from_utf8(out).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned()))
}

/// A serde_json formatter that escapes DEL and C1 in strings and leaves the layout to `F`.
struct TerminalSafe<F>(F);

impl<F: serde_json::ser::Formatter> serde_json::ser::Formatter for TerminalSafe<F> {
    fn write_string_fragment<W: ?Sized + io::Write>(&mut self, w: &mut W, fragment: &str) -> io::Result<()> {
        let mut rest = fragment;
        while let Some((i, c)) = rest.char_indices().find(|&(_, c)| ('\u{7f}'..='\u{9f}').contains(&c)) {
            w.write_all(&rest.as_bytes()[..i])?;
            write!(w, "\\u{:04x}", c as u32)?;
            rest = &rest[i + c.len_utf8()..];
        }
        w.write_all(rest.as_bytes())
    }
    fn begin_array<W: ?Sized + io::Write>(&mut self, w: &mut W) -> io::Result<()> {
        self.0.begin_array(w)
    }
    fn end_array<W: ?Sized + io::Write>(&mut self, w: &mut W) -> io::Result<()> {
        self.0.end_array(w)
    }
    fn begin_array_value<W: ?Sized + io::Write>(&mut self, w: &mut W, first: bool) -> io::Result<()> {
        self.0.begin_array_value(w, first)
    }
    fn end_array_value<W: ?Sized + io::Write>(&mut self, w: &mut W) -> io::Result<()> {
        self.0.end_array_value(w)
    }
    fn begin_object<W: ?Sized + io::Write>(&mut self, w: &mut W) -> io::Result<()> {
        self.0.begin_object(w)
    }
    fn end_object<W: ?Sized + io::Write>(&mut self, w: &mut W) -> io::Result<()> {
        self.0.end_object(w)
    }
    fn begin_object_key<W: ?Sized + io::Write>(&mut self, w: &mut W, first: bool) -> io::Result<()> {
        self.0.begin_object_key(w, first)
    }
    fn end_object_key<W: ?Sized + io::Write>(&mut self, w: &mut W) -> io::Result<()> {
        self.0.end_object_key(w)
    }
    fn begin_object_value<W: ?Sized + io::Write>(&mut self, w: &mut W) -> io::Result<()> {
        self.0.begin_object_value(w)
    }
    fn end_object_value<W: ?Sized + io::Write>(&mut self, w: &mut W) -> io::Result<()> {
        self.0.end_object_value(w)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The attempts of a user's thread names: a title set by OSC 2, the clipboard by OSC 52,
    /// the screen cleared by a C1 CSI, a forged line by a newline.
    const ATTEMPTS: [&str; 4] = ["\x1b]2;owned\x07", "\x1b]52;c;SGk=\x07", "\u{9b}2J\u{9d}0;x\u{9c}", "ok\nERROR forged\r\x7f"];

    #[test]
    fn controls_are_escaped_and_everything_else_kept() {
        assert_eq!(escape(ATTEMPTS[0]), "\\x1b]2;owned\\x07");
        assert_eq!(escape(ATTEMPTS[1]), "\\x1b]52;c;SGk=\\x07");
        assert_eq!(escape(ATTEMPTS[2]), "\\u{9b}2J\\u{9d}0;x\\u{9c}");
        assert_eq!(escape(ATTEMPTS[3]), "ok\\nERROR forged\\r\\x7f");
        assert_eq!(escape("\0\t"), "\\x00\\t");
        // Everything that is not a control stays as it is: non-ASCII letters, symbols, a
        // backslash, the characters just past C1.
        for kept in ["nginx: worker", "Bäckerei-µs 温度 °C", "a\\x1b", "\u{a0}\u{ff}\u{2028}"] {
            assert!(matches!(escape(kept), Cow::Borrowed(_)), "{kept:?} was copied");
            assert_eq!(escape(kept), kept);
        }
        for a in ATTEMPTS {
            let e = escape(a);
            assert!(!e.chars().any(char::is_control), "{e:?}");
            assert_eq!(escape(&e), e, "escaping twice changes nothing");
            assert_eq!(Escaped(a).to_string(), e);
        }
    }

    #[test]
    fn a_report_keeps_its_lines_and_loses_its_controls() {
        let report = format!("class batch\n  comm={}\n  comm={}\n", ATTEMPTS[0], ATTEMPTS[2]);
        let e = escape_lines(&report);
        assert_eq!(e, "class batch\n  comm=\\x1b]2;owned\\x07\n  comm=\\u{9b}2J\\u{9d}0;x\\u{9c}\n");
        assert!(matches!(escape_lines("a\nb\n"), Cow::Borrowed(_)));
    }

    #[test]
    fn bytes_that_are_not_utf8_print_as_hex_and_never_alike() {
        assert_eq!(EscapedBytes(b"\xff\xfeaudjx").to_string(), "\\xff\\xfeaudjx");
        assert_eq!(EscapedBytes("\x1b]2;t\x07é".as_bytes()).to_string(), "\\x1b]2;t\\x07é");
        assert_ne!(EscapedBytes(b"a\xff").to_string(), EscapedBytes(b"a\xfe").to_string());
    }

    #[test]
    fn json_for_a_terminal_escapes_del_and_c1_and_parses_to_the_same_value() {
        let v = serde_json::json!({ "comm": ATTEMPTS, "n": [1, 2] });
        for pretty in [false, true] {
            let text = to_json(&v, pretty).unwrap();
            assert!(!text.chars().any(|c| c.is_control() && c != '\n' && !(pretty && c == ' ')), "{text:?}");
            assert!(text.contains("\\u009b2J\\u009d0;x\\u009c") && text.contains("\\u001b]2;owned\\u0007"), "{text}");
            assert_eq!(serde_json::from_str::<serde_json::Value>(&text).unwrap(), v);
            assert_eq!(text.contains('\n'), pretty);
        }
        assert_eq!(
            to_json(&v, true).unwrap().replace("\\u009b", "\u{9b}").replace("\\u009d", "\u{9d}").replace("\\u009c", "\u{9c}").replace("\\u007f", "\u{7f}"),
            serde_json::to_string_pretty(&v).unwrap(),
            "the layout is serde_json's own"
        );
    }
}
