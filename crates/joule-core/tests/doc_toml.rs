//! Tier 1: every TOML example in README.md and docs/ is a config `joule check-config` accepts —
//! parsed and validated by `Config::parse`, the parser and validation check-config runs (its
//! admission on the machine aside), so no example an operator copies is refused.
//!
//! The rule (CONTRIBUTING.md): a block opened with ```` ```toml ```` is a whole config and must
//! pass `Config::parse`. A block that is deliberately one section to merge into a config opens
//! with ```` ```toml fragment ````: it must still be TOML whose every key and type the config
//! knows (unknown keys are errors), but is not checked against sections it does not carry.

use joule_core::config::Config;
use std::path::{Path, PathBuf};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// README.md and every `*.md` under docs/, sorted.
fn markdown_files() -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())).flatten() {
            let p = entry.path();
            if p.is_dir() {
                walk(&p, out);
            } else if p.extension().is_some_and(|x| x == "md") {
                out.push(p);
            }
        }
    }
    let mut files = vec![repo().join("README.md")];
    walk(&repo().join("docs"), &mut files);
    files.sort();
    files
}

/// A fenced TOML block: where it starts (1-based line of the fence), whether it is marked a
/// fragment, and its text.
struct Block {
    line: usize,
    fragment: bool,
    text: String,
}

/// The ```toml blocks of a markdown text. A fence may be indented (inside a list item); the
/// block's lines lose that indentation.
fn toml_blocks(md: &str) -> Vec<Block> {
    let mut out = Vec::new();
    let mut open: Option<(usize, usize, bool, String)> = None;
    for (i, line) in md.lines().enumerate() {
        let trimmed = line.trim_start();
        match &mut open {
            None => {
                if let Some(info) = trimmed.strip_prefix("```") {
                    let mut words = info.split_whitespace();
                    if words.next() == Some("toml") {
                        let rest: Vec<&str> = words.collect();
                        assert!(rest.is_empty() || rest == ["fragment"], "line {}: unknown toml info string {info:?} (only `toml` or `toml fragment`)", i + 1);
                        open = Some((i + 1, line.len() - trimmed.len(), rest == ["fragment"], String::new()));
                    } else {
                        // Another language's block, or none: skip to its closing fence.
                        open = Some((0, 0, false, String::new()));
                    }
                }
            }
            Some((start, indent, fragment, text)) => {
                if trimmed.starts_with("```") {
                    if *start > 0 {
                        out.push(Block { line: *start, fragment: *fragment, text: std::mem::take(text) });
                    }
                    open = None;
                } else if *start > 0 {
                    let cut = line.len() - line.trim_start().len();
                    text.push_str(&line[cut.min(*indent)..]);
                    text.push('\n');
                }
            }
        }
    }
    assert!(open.is_none(), "a fenced block is never closed");
    out
}

#[test]
fn every_toml_block_in_readme_and_docs_passes_check_configs_parser() {
    let mut checked = 0;
    let mut failures = Vec::new();
    for file in markdown_files() {
        let md = std::fs::read_to_string(&file).unwrap();
        let name = file.strip_prefix(repo()).unwrap_or(&file).display().to_string();
        for b in toml_blocks(&md) {
            checked += 1;
            // Each problem at its line in the markdown file: the block's line i is the file's
            // fence line + i.
            let at = |line: Option<usize>| line.map_or(format!("{name}:{}", b.line), |l| format!("{name}:{}", b.line + l));
            let result = if b.fragment {
                toml::from_str::<Config>(&b.text).map(|_| ()).map_err(|e| vec![format!("{} (toml fragment): {}", at(None), e.message())])
            } else {
                Config::parse(&b.text)
                    .map(|_| ())
                    .map_err(|problems| problems.iter().map(|p| format!("{}: {} (hint: {})", at(p.line), p.message, p.hint)).collect())
            };
            if let Err(why) = result {
                failures.extend(why);
            }
        }
    }
    assert!(failures.is_empty(), "TOML blocks check-config refuses:\n{}", failures.join("\n"));
    // The README's example config at least; a walk that finds nothing would pass vacuously.
    assert!(checked >= 1, "no ```toml block found in README.md or docs/");
}

#[test]
fn the_block_finder_sees_whole_blocks_fragments_and_skips_other_languages() {
    let md = "text\n```toml\n[agent]\nperiod_ms = 100\n```\n```sh\n[not toml]\n```\n  ```toml fragment\n  [elevate]\n  cpu = 0\n  ```\n";
    let blocks = toml_blocks(md);
    assert_eq!(blocks.len(), 2);
    assert_eq!((blocks[0].line, blocks[0].fragment, blocks[0].text.as_str()), (2, false, "[agent]\nperiod_ms = 100\n"));
    assert_eq!((blocks[1].line, blocks[1].fragment, blocks[1].text.as_str()), (9, true, "[elevate]\ncpu = 0\n"));
    // A fragment still may not name a key the config does not know.
    assert!(toml::from_str::<Config>("[elevate]\ncpus = 0\n").is_err());
}
