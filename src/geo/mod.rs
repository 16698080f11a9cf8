//! geo
