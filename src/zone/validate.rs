//! Zone validation.
