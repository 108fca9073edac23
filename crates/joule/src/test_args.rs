//! Unit tests' way to parse a subcommand's arguments as clap does (`joule <name> <extra>`),
//! for the commands.

/// The arguments `A` as clap parses `<name> <extra>`.
pub fn parse_args<A: clap::Args>(name: &str, extra: &[&str]) -> A {
    #[derive(clap::Parser)]
    struct Cli<A: clap::Args> {
        #[command(flatten)]
        a: A,
    }
    <Cli<A> as clap::Parser>::parse_from(std::iter::once(name).chain(extra.iter().copied())).a
}
