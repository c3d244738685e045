//! Image rules the kubelet applies before it asks a runtime for an image: which registry
//! credentials go with a reference ([`keyring`]). Pure: the agent reads the Secrets and hands
//! their data here; the runtime does the pulling.

pub mod keyring;
