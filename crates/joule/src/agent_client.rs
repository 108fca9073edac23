//! The status socket's client, for this crate's commands: it lives with the view it reads in
//! joule-core (`joule_core::view::client`), where joule-bench reads the same view.

pub use joule_core::view::client::*;
