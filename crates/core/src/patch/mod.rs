//! JSON patch, JSON merge patch, strategic merge patch and server-side apply.

pub mod strategy;
