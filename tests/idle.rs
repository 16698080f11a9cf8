//! An idle server stays idle: each of its threads wakes only as often as its own timer says
//! (UDP workers every 250 ms to look at the stop flag, the shield once per tick, the control
//! watcher at its 2 s backstop poll). A thread woken by its own activity (the watcher once
//! reacted to its own reads of the control file, 20 times a second) shows up here.

mod control_common;

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

#[test]
fn an_idle_server_wakes_only_on_its_timers() {
    let setup = Setup::new("idle");
    let server = setup.start();
    // Let startup settle (the first shield tick, the watcher's first look).
    std::thread::sleep(Duration::from_millis(500));
    let before = wakeups(server.pid());
    let idle = Duration::from_secs(4);
    std::thread::sleep(idle);
    let after = wakeups(server.pid());
    assert!(
        after.contains_key("control-watch"),
        "no control-watch thread: {after:?}"
    );
    // Timer wake-ups in 4 s, with room for scheduling noise: the watcher polls every 2 s
    // (2), each UDP worker every 250 ms (16 per worker), the shield ticks once a second (4).
    let limits = [
        ("control-watch", 6),
        ("notify-rs inoti", 6),
        ("udp-0", 30),
        ("shield", 12),
    ];
    for (thread, limit) in limits {
        let woke =
            after.get(thread).copied().unwrap_or(0) - before.get(thread).copied().unwrap_or(0);
        assert!(
            woke <= limit,
            "{thread} woke {woke} times in {idle:?} of idleness (limit {limit}): {before:?} -> {after:?}"
        );
    }
}
