//! Small file-reading helpers shared by the sysfs/procfs sources: read into a reused buffer,
//! parse one integer, list a directory's entries by name prefix.

use std::fs;
use std::io::{self, Read};
use std::path::{Path, PathBuf};

/// Reads a whole file into `buf` (cleared first), reusing its allocation.
pub(crate) fn read_into(path: &Path, buf: &mut String) -> io::Result<()> {
    buf.clear();
    fs::File::open(path)?.read_to_string(buf)?;
    Ok(())
}

/// Reads a file holding one unsigned integer (sysfs style, trailing newline allowed).
pub(crate) fn read_u64(path: &Path) -> io::Result<u64> {
    let s = fs::read_to_string(path)?;
    s.trim().parse().map_err(|e| io::Error::new(io::ErrorKind::InvalidData, format!("{e}: {:?}", s.trim())))
}

/// Reads a file holding one signed integer (temperatures in m°C can be negative).
pub(crate) fn read_i64(path: &Path) -> io::Result<i64> {
    let s = fs::read_to_string(path)?;
    s.trim().parse().map_err(|e| io::Error::new(io::ErrorKind::InvalidData, format!("{e}: {:?}", s.trim())))
}

/// Reads a one-line text file, trimmed.
pub(crate) fn read_trimmed(path: &Path) -> io::Result<String> {
    Ok(fs::read_to_string(path)?.trim().to_string())
}

/// Entries of `dir` named `<prefix><number>`, sorted by that number. A missing directory is an
/// empty list: optional hardware that is not there is not an error.
pub(crate) fn numbered_entries(dir: &Path, prefix: &str) -> Vec<(u32, PathBuf)> {
    let Ok(rd) = fs::read_dir(dir) else { return Vec::new() };
    let mut out: Vec<(u32, PathBuf)> = rd
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let name = e.file_name();
            let n = name.to_str()?.strip_prefix(prefix)?.parse::<u32>().ok()?;
            Some((n, e.path()))
        })
        .collect();
    out.sort_by_key(|(n, _)| *n);
    out
}

/// Parses `key value` lines (cpu.stat, PSI fields are handled separately) and returns the value
/// of `key`, if present.
pub(crate) fn keyed_u64(text: &str, key: &str) -> Option<u64> {
    text.lines().find_map(|l| {
        let mut it = l.split_ascii_whitespace();
        (it.next()? == key).then(|| it.next()?.parse().ok()).flatten()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keyed_u64_finds_exact_key_only() {
        let t = "nr_periods 3\nnr_throttled 2\nthrottled_time 500\nthrottled_usec 7\n";
        assert_eq!(keyed_u64(t, "nr_throttled"), Some(2));
        assert_eq!(keyed_u64(t, "throttled_time"), Some(500));
        assert_eq!(keyed_u64(t, "throttled"), None);
    }
}
