//! The per-type write pipeline steps from `tandem-core`, in the order upstream runs them: defaults
//! (at decode time), then the strategy's `PrepareForCreate`/`PrepareForUpdate`, then validation.

pub use tandem_core::defaults::apply_defaults;
pub use tandem_core::strategy::{
    prepare_for_create, prepare_for_status_update, prepare_for_update,
};
pub use tandem_core::validation::{validate_create, validate_status_update, validate_update};
