//! Registry configuration as k3s' `registries.yaml` gives it (`tandem up --registry-config` and
//! `tandem agent --registry-config`), turned into what containerd 1.6 reads: one `hosts.toml` per
//! registry under the node's `certs.d` directory (CRI `registry.config_path`), and the
//! credentials of each host in its CRI config (`registry.configs."<host>".auth`).
//!
//! The same shape as the service proxy: the file is read into a model ([`model`]), pure rules
//! render it as text ([`hosts`], tested as text), and the node's containerd start writes the
//! files (`runtime::cri::containerd`).

pub mod hosts;
pub mod model;

pub use hosts::{RegistryFiles, render};
pub use model::{RegistriesConfig, RegistryConfigError};
