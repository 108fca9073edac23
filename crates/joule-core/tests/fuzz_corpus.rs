//! Tier 1: the fuzz targets' corpus (`fuzz/corpus`, issue 17) replayed on stable, with a few
//! thousand deterministic mutations of each file (byte flips, cuts, repeats): the config
//! loader and the journal reader never panic, and a replay of whatever the reader accepts, on
//! the fake effects, never panics either; the /proc parsers never panic and give a task's name
//! and a cgroup's path back byte for byte (`joule_core::testing::procfs_round_trips`).
//! `cargo +nightly fuzz run config|journal|procfs` in `fuzz/` explores further where a nightly
//! toolchain is present.

use joule_core::config::Config;
use joule_core::effects::FakeEffects;
use joule_core::journal;
use std::path::{Path, PathBuf};

fn corpus(kind: &str) -> Vec<(PathBuf, Vec<u8>)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus").join(kind);
    let mut v: Vec<(PathBuf, Vec<u8>)> = std::fs::read_dir(&dir).unwrap().flatten().map(|e| (e.path(), std::fs::read(e.path()).unwrap())).collect();
    v.sort();
    assert!(!v.is_empty(), "no corpus in {}", dir.display());
    v
}

/// xorshift64: the same mutations on every run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// `input` changed in one of a few ways a fuzzer would.
fn mutate(rng: &mut Rng, input: &[u8]) -> Vec<u8> {
    let mut v = input.to_vec();
    const INTERESTING: &[&[u8]] = &[b"9223372036854775807", b"-1", b"0", b"\"\"", b"[", b"]", b"{", b"\n", b"=", b"\xff", b"1e308", b"nan"];
    for _ in 0..=rng.below(3) {
        let at = rng.below(v.len() + 1);
        match rng.below(5) {
            0 if !v.is_empty() => {
                let i = rng.below(v.len());
                v[i] ^= 1 << rng.below(8);
            }
            1 => v.truncate(at),
            2 => {
                let piece = INTERESTING[rng.below(INTERESTING.len())];
                v.splice(at..at, piece.iter().copied());
            }
            3 if !v.is_empty() => {
                let from = rng.below(v.len());
                let to = (from + rng.below(64)).min(v.len());
                let copy = v[from..to].to_vec();
                v.splice(at.min(v.len())..at.min(v.len()), copy);
            }
            _ => {
                let end = (at + rng.below(16)).min(v.len());
                v.drain(at.min(end)..end);
            }
        }
    }
    v
}

const MUTATIONS: usize = 300;

#[test]
fn the_config_loader_never_panics_on_the_corpus_or_its_mutations() {
    let mut rng = Rng(0x6a6f_756c_6521);
    let mut parsed = 0;
    for (path, bytes) in corpus("config") {
        for i in 0..=MUTATIONS {
            let input = if i == 0 { bytes.clone() } else { mutate(&mut rng, &bytes) };
            if let Ok(text) = std::str::from_utf8(&input) {
                let r = Config::parse(text);
                if let Err(problems) = &r {
                    assert!(!problems.is_empty(), "{}: refused without a problem", path.display());
                }
                parsed += 1;
            }
        }
    }
    assert!(parsed > 1000, "only {parsed} inputs were text");
}

#[test]
fn the_journal_reader_and_a_replay_never_panic_on_the_corpus_or_its_mutations() {
    let mut rng = Rng(0x756e_646f);
    let fx = FakeEffects::default();
    for (path, bytes) in corpus("journal") {
        for i in 0..=MUTATIONS {
            let input = if i == 0 { bytes.clone() } else { mutate(&mut rng, &bytes) };
            let (entries, _skipped) = journal::parse_entries(input.as_slice(), &path).unwrap();
            let undos: Vec<_> = entries.into_iter().map(|e| e.undo).collect();
            journal::replay_checked_all(&undos, &fx);
        }
    }
}

#[test]
fn the_proc_parsers_never_panic_and_keep_names_byte_for_byte_on_the_corpus_or_its_mutations() {
    let mut rng = Rng(0x7072_6f63);
    let mut not_utf8 = 0;
    for (_, bytes) in corpus("procfs") {
        for i in 0..=MUTATIONS {
            let input = if i == 0 { bytes.clone() } else { mutate(&mut rng, &bytes) };
            not_utf8 += usize::from(std::str::from_utf8(&input).is_err());
            joule_core::testing::procfs_round_trips(&input);
        }
    }
    assert!(not_utf8 > 300, "only {not_utf8} inputs were not UTF-8");
}
