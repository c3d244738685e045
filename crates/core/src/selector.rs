//! Label and field selectors.
