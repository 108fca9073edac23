//! Small one-shot subcommands (check-config, restore) and the glue to `joule qos`.

pub mod check_config;
pub mod restore;

