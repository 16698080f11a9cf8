//! zone
