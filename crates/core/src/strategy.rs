//! Per-resource create/update strategies: what the server resets, copies and bumps before validation (upstream `PrepareForCreate`/`PrepareForUpdate`).
