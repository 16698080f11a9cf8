//! dns
