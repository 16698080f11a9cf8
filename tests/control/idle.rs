//! An idle server stays idle: each of its threads wakes only as often as its own timer says
//! (UDP workers every 250 ms to look at the stop flag, the shield once per tick, the control
//! watcher at its 2 s backstop poll). A thread woken by its own activity (the watcher once
//! reacted to its own reads of the control file, 20 times a second) shows up here.

use crate::control_common;

use std::collections::BTreeMap;
use std::time::Duration;

use control_common::*;

/// Voluntary context switches per thread name (summed over threads of the same name).
fn wakeups(pid: u32) -> BTreeMap<String, u64> {
    let mut counts = BTreeMap::new();
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).expect("the server's threads");
    for task in tasks.filter_map(Result::ok) {
        let path = task.path();
        let name = std::fs::read_to_string(path.join("comm")).unwrap_or_default();
        let status = std::fs::read_to_string(path.join("status")).unwrap_or_default();
        let switches = status
            .lines()
            .find_map(|l| l.strip_prefix("voluntary_ctxt_switches:"))
            .and_then(|v| v.trim().parse::<u64>().ok())
            .unwrap_or(0);
        *counts.entry(name.trim().to_string()).or_insert(0) += switches;
    }
    counts
}

/// The most wake-ups in 4 s of idleness a thread of this name may have, with room for
/// scheduling noise: the watcher polls every 2 s (2), each UDP worker every 250 ms (16), the
/// shield ticks once a second (4). Any other thread (the admin endpoint's, a file watcher's,
/// whatever a dependency starts) has no timer of its own that fires this often.
fn wakeup_limit(thread: &str) -> u64 {
    match thread {
        "control-watch" => 6,
        "shield" => 12,
        worker if worker.starts_with("udp-") => 30,
        _ => 6,
    }
}

/// The threads whose timers this test is about: each must exist, or there is nothing to check.
const REQUIRED: [&str; 3] = ["control-watch", "udp-0", "shield"];

#[test]
fn an_idle_server_wakes_only_on_its_timers() {
    let setup = Setup::new("idle");
    let server = setup.start();
    // Let startup settle: the shield's second tick has run (the first runs before "ready").
    server.wait_for_status("a shield tick after startup", Duration::from_secs(5), |s| {
        s["shield"]["ticks"].as_u64() >= Some(2)
    });
    let before = wakeups(server.pid());
    let idle = Duration::from_secs(4);
    std::thread::sleep(idle);
    let after = wakeups(server.pid());
    for thread in REQUIRED {
        assert!(
            before.contains_key(thread) && after.contains_key(thread),
            "no {thread} thread to check: {before:?} -> {after:?}"
        );
    }
    for (thread, &woke_after) in &after {
        let woke = woke_after.saturating_sub(before.get(thread).copied().unwrap_or(0));
        let limit = wakeup_limit(thread);
        assert!(
            woke <= limit,
            "{thread} woke {woke} times in {idle:?} of idleness (limit {limit}): {before:?} -> {after:?}"
        );
    }
}
