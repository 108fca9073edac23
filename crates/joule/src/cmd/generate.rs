//! `joule generate man|completions --out DIR` (hidden): the man pages and shell completions
//! the Debian package and `make install` ship, generated from the command-line definitions so
//! they never disagree with `--help`.

use anyhow::Context;
use std::path::{Path, PathBuf};

#[derive(clap::Subcommand)]
pub enum GenerateCmd {
    /// Man pages (section 1): joule.1 and one per subcommand.
    ///
    /// A subcommand's page is named by its path, e.g. joule-agent.1 and joule-qos-plan.1.
    Man {
        /// The directory to write them into (created if missing).
        #[arg(long, value_name = "DIR")]
        out: PathBuf,
    },
    /// Shell completions: joule.bash, _joule (zsh) and joule.fish.
    Completions {
        /// The directory to write them into (created if missing).
        #[arg(long, value_name = "DIR")]
        out: PathBuf,
    },
}

pub fn run(c: GenerateCmd) -> anyhow::Result<()> {
    match c {
        GenerateCmd::Man { out } => {
            std::fs::create_dir_all(&out).with_context(|| format!("while creating {}", out.display()))?;
            let mut cmd = crate::command();
            cmd.build();
            for name in man_pages(&cmd, &out)? {
                println!("{}", out.join(name).display());
            }
            Ok(())
        }
        GenerateCmd::Completions { out } => {
            std::fs::create_dir_all(&out).with_context(|| format!("while creating {}", out.display()))?;
            for shell in [clap_complete::Shell::Bash, clap_complete::Shell::Zsh, clap_complete::Shell::Fish] {
                let f = clap_complete::generate_to(shell, &mut crate::command(), "joule", &out)
                    .with_context(|| format!("while writing the {shell} completion into {}", out.display()))?;
                println!("{}", f.display());
            }
            Ok(())
        }
    }
}

/// Writes the page of `cmd` (built: its display name is `joule-qos-plan` for `joule qos plan`)
/// and of every subcommand that is not hidden, depth first; returns the file names.
fn man_pages(cmd: &clap::Command, out: &Path) -> anyhow::Result<Vec<String>> {
    let name = format!("{}.1", cmd.get_display_name().unwrap_or_else(|| cmd.get_name()));
    let mut page = Vec::new();
    clap_mangen::Man::new(cmd.clone()).render(&mut page)?;
    std::fs::write(out.join(&name), page).with_context(|| format!("while writing {}", out.join(&name).display()))?;
    let mut names = vec![name];
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set() && s.get_name() != "help") {
        names.extend(man_pages(sub, out)?);
    }
    Ok(names)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_page_for_joule_and_every_visible_subcommand_none_for_hidden_ones() {
        let dir = tempfile::tempdir().unwrap();
        run(GenerateCmd::Man { out: dir.path().into() }).unwrap();
        let names: Vec<String> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
        for want in ["joule.1", "joule-agent.1", "joule-check-config.1", "joule-doctor.1", "joule-qos.1", "joule-restore.1"] {
            assert!(names.iter().any(|n| n == want), "{want} missing from {names:?}");
        }
        assert!(!names.iter().any(|n| n.starts_with("joule-generate") || n.starts_with("joule-help")), "{names:?}");
        let agent = std::fs::read_to_string(dir.path().join("joule-agent.1")).unwrap();
        assert!(agent.starts_with(".ie") || agent.contains(".TH joule-agent 1"), "{agent}");
        assert!(agent.contains("/etc/joule/joule.toml"), "the page says which config is read:\n{agent}");
    }

    #[test]
    fn completions_for_bash_zsh_and_fish() {
        let dir = tempfile::tempdir().unwrap();
        run(GenerateCmd::Completions { out: dir.path().into() }).unwrap();
        for f in ["joule.bash", "_joule", "joule.fish"] {
            let text = std::fs::read_to_string(dir.path().join(f)).unwrap();
            assert!(text.contains("check-config"), "{f}: {text}");
        }
    }
}
