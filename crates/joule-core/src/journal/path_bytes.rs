//! A path in a journal record, byte for byte: a JSON string when it is UTF-8 (every path joule
//! chooses), else its bytes as an array of numbers. A task's origin cgroup is named by whoever
//! was handed its subtree (a user's `user@UID.service`, a container), in any bytes: its record
//! must hold that name exactly, or the restore would put the task somewhere else, and a
//! record that could not be written would stop every move of its period.

use serde::{Deserialize, Deserializer, Serializer};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};

pub fn serialize<S: Serializer>(path: &Path, s: S) -> Result<S::Ok, S::Error> {
    match path.to_str() {
        Some(text) => s.serialize_str(text),
        None => s.collect_seq(path.as_os_str().as_bytes()),
    }
}

pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<PathBuf, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Spelled {
        Text(String),
        Bytes(Vec<u8>),
    }
    Ok(match Spelled::deserialize(d)? {
        Spelled::Text(t) => PathBuf::from(t),
        Spelled::Bytes(b) => PathBuf::from(std::ffi::OsString::from_vec(b)),
    })
}
