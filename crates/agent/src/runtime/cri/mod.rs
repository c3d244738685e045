//! The `cri` backend: a CRI v1 client to a containerd child process that tandem starts and
//! supervises itself, running real Linux pods with CNI bridge networking.

pub mod archives;
pub mod backend;
pub mod client;
pub mod containerd;
pub mod gc_loop;
pub mod image_gc;
pub mod images_dir;
mod leftovers;
pub mod proto;

pub use backend::{CriConfig, CriRuntime};
