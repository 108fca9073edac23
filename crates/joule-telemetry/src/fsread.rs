//! Small file-reading helpers of the sysfs/procfs sources that only telemetry needs: read into
//! a reused buffer, parse one number, list a directory's numbered entries. The helpers every
//! crate shares (`read_trimmed`, `keyed_u64`) are in `joule_core::fsread`.

use std::fmt;
use std::fs;
use std::io::{self, Read};
use std::path::{Path, PathBuf};
use std::str::FromStr;

/// Reads a whole file into `buf` (cleared first), reusing its allocation.
pub(crate) fn read_into(path: &Path, buf: &mut String) -> io::Result<()> {
    buf.clear();
    fs::File::open(path)?.read_to_string(buf)?;
    Ok(())
}

/// Reads a file holding one number (sysfs style, trailing newline allowed): `u64` counters,
/// `i64` temperatures in m°C (which can be negative).
pub(crate) fn read_num<T: FromStr>(path: &Path) -> io::Result<T>
where
    T::Err: fmt::Display,
{
    let s = fs::read_to_string(path)?;
    s.trim().parse().map_err(|e| io::Error::new(io::ErrorKind::InvalidData, format!("{e}: {:?}", s.trim())))
}

/// Entries of `dir` named `<prefix><number><suffix>` (e.g. `hwmon3`, `temp2_input`), sorted by
/// that number. A missing directory is an empty list: optional hardware that is not there is
/// not an error.
pub(crate) fn numbered_files(dir: &Path, prefix: &str, suffix: &str) -> Vec<(u32, PathBuf)> {
    let Ok(rd) = fs::read_dir(dir) else { return Vec::new() };
    let mut out: Vec<(u32, PathBuf)> = rd
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let name = e.file_name();
            let n = name.to_str()?.strip_prefix(prefix)?.strip_suffix(suffix)?.parse::<u32>().ok()?;
            Some((n, e.path()))
        })
        .collect();
    out.sort_by_key(|(n, _)| *n);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbered_files_by_prefix_and_suffix_in_numeric_order() {
        let t = tempfile::tempdir().unwrap();
        for n in ["temp10_input", "temp2_input", "temp1_max", "temp_input", "tempx_input", "power1_input"] {
            fs::write(t.path().join(n), "").unwrap();
        }
        let got: Vec<u32> = numbered_files(t.path(), "temp", "_input").into_iter().map(|(n, _)| n).collect();
        assert_eq!(got, [2, 10]);
        assert_eq!(numbered_files(t.path(), "temp", "_input")[0].1, t.path().join("temp2_input"));
        assert!(numbered_files(&t.path().join("missing"), "temp", "").is_empty());
    }

    #[test]
    fn read_num_parses_signed_and_unsigned() {
        let t = tempfile::tempdir().unwrap();
        let f = t.path().join("v");
        fs::write(&f, "-1500\n").unwrap();
        assert_eq!(read_num::<i64>(&f).unwrap(), -1500);
        assert_eq!(read_num::<u64>(&f).unwrap_err().kind(), io::ErrorKind::InvalidData);
    }
}
