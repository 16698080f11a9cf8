//! Tests of one server process and its sockets: answers, protocol, TCP, limits, steering,
//! health, RRL, signals and upgrade, sd_notify, XDP, and the deploy/ lint.
//!
//! One test binary per group (issue 29 item 6): every binary links the whole library, so a
//! binary per file cost a link each. Each file is a module; the shared helpers are declared
//! once here.

#[path = "../common/mod.rs"]
mod common;
#[path = "../hostile_common/mod.rs"]
mod hostile_common;
#[path = "../steering_common/mod.rs"]
mod steering_common;

mod admin_limits;
mod amplification;
mod cells;
mod core_answers;
mod core_protocol;
mod core_tcp;
mod deploy_lint;
mod dig;
mod health;
mod rrl;
mod sd_notify;
mod smoke;
mod steering;
mod steering_weighted;
mod tcp_limits;
mod upgrade;
mod xdp;
