//! Every help text as an operator sees it: `joule --help` and each subcommand's help, nested
//! ones (`joule qos status --help`) and hidden ones included, rendered by clap at a fixed width
//! so the result does not depend on the terminal. Each must fit 100 columns, list subcommands
//! with summaries that are not cut mid-sentence, and name no path of the source repository
//! (an installed joule has none of it).

use clap::CommandFactory;

const WIDTH: usize = 100;

/// Every command path below `cmd` (itself first), without clap's own `help` subcommand.
fn paths(cmd: &clap::Command, prefix: &[String], out: &mut Vec<Vec<String>>) {
    out.push(prefix.to_vec());
    for sc in cmd.get_subcommands().filter(|sc| sc.get_name() != "help") {
        let mut p = prefix.to_vec();
        p.push(sc.get_name().to_string());
        paths(sc, &p, out);
    }
}

/// What `joule <path> <flag>` prints, exactly as the binary renders it at `WIDTH` columns.
fn render(path: &[String], flag: &str) -> String {
    let args = std::iter::once("joule").chain(path.iter().map(String::as_str)).chain(std::iter::once(flag));
    match crate::Cli::command().term_width(WIDTH).try_get_matches_from(args) {
        Err(e) if e.kind() == clap::error::ErrorKind::DisplayHelp => e.render().to_string(),
        Err(e) => panic!("joule {} {flag}: {e}", path.join(" ")),
        Ok(_) => panic!("joule {} {flag} printed no help", path.join(" ")),
    }
}

/// The problems of one rendered help text.
fn problems(text: &str) -> Vec<String> {
    let mut found = Vec::new();
    for line in text.lines() {
        let cols = line.chars().count();
        if cols > WIDTH {
            found.push(format!("{cols} columns: {line}"));
        }
        if let Some(p) = repo_path(line) {
            found.push(format!("names the repository path {p:?}: {line}"));
        }
    }
    found.extend(cut_summaries(text));
    found
}

/// A path of the source tree: a top-level directory of the repository followed by `/`, or a
/// Markdown file, as a word of its own (not a part of `/sys/...` or `/etc/...`).
fn repo_path(line: &str) -> Option<String> {
    const DIRS: [&str; 8] = ["docs/", "crates/", "deploy/", "scripts/", "testdata/", "fuzz/", "target/", "src/"];
    let boundary = |i: usize| i == 0 || !line[..i].ends_with(|c: char| c.is_alphanumeric() || "/_-.".contains(c));
    for d in DIRS {
        for (i, _) in line.match_indices(d) {
            if boundary(i) {
                return Some(line[i..].split_whitespace().next().unwrap_or(d).to_string());
            }
        }
    }
    line.split(|c: char| c.is_whitespace() || "`()[],;'\"".contains(c))
        .find(|w| w.ends_with(".md") || w.starts_with("README") || *w == "Makefile" || *w == "Cargo.toml")
        .map(str::to_string)
}

/// Summaries in a `Commands:` list that clap wrapped mid-sentence (a line that continues on
/// the next without ending a sentence) or cut short (`...`).
fn cut_summaries(text: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut lines = text.lines().skip_while(|l| l.trim_end() != "Commands:").skip(1).take_while(|l| !l.trim().is_empty()).peekable();
    while let Some(line) = lines.next() {
        let text = line.trim_end();
        if text.ends_with("...") || text.ends_with('…') {
            found.push(format!("summary cut short: {text}"));
        }
        // An entry is `  name  summary`; a continuation is indented past the names.
        let continued = lines.peek().is_some_and(|next| next.starts_with("    ") && next.len() - next.trim_start().len() > 2);
        if continued && !text.ends_with(['.', '!', '?', ':']) {
            found.push(format!("summary wraps mid-sentence: {text}"));
        }
    }
    found
}

#[test]
fn every_help_fits_100_columns_has_whole_summaries_and_names_no_repository_path() {
    let mut all = Vec::new();
    paths(&crate::Cli::command(), &[], &mut all);
    assert!(all.len() > 10, "{all:?}");
    let mut found = Vec::new();
    for path in &all {
        let name = std::iter::once("joule").chain(path.iter().map(String::as_str)).collect::<Vec<_>>().join(" ");
        for flag in ["--help", "-h"] {
            for p in problems(&render(path, flag)) {
                found.push(format!("{name} {flag}: {p}"));
            }
        }
    }
    assert!(found.is_empty(), "{}", found.join("\n"));
}

#[test]
fn the_checks_catch_what_they_are_for() {
    let long = "x".repeat(WIDTH + 1);
    assert_eq!(problems(&long).len(), 1);
    for bad in ["see docs/qos.md", "run `joule agent --config deploy/joule.toml`", "(scripts/install-deps.sh)", "see README.md"] {
        assert!(repo_path(bad).is_some(), "{bad}");
    }
    for fine in ["reads /sys/fs/cgroup and /etc/joule/joule.toml", "the /run/joule journal", "/usr/share/doc/joule"] {
        assert_eq!(repo_path(fine), None, "{fine}");
    }
    let listed = "Commands:\n  agent    Run the node agent: sample the machine every\n           period.\n  qos      Guarantees.\n\nOptions:\n";
    assert_eq!(cut_summaries(listed).len(), 1, "{:?}", cut_summaries(listed));
    let whole = "Commands:\n  agent    Run the node agent.\n           It samples.\n  qos      Guarantees\n\n";
    assert!(cut_summaries(whole).is_empty(), "{:?}", cut_summaries(whole));
}
