//! Replays every saved fuzz reproducer (`fuzz/regressions/<target>/*`) and every seed
//! (`fuzz/seeds/<target>/*`) through the very checks the fuzz targets run (`fuzz/src/lib.rs`,
//! compiled here as a module), so a crash found once stays fixed without cargo-fuzz or nightly.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};

#[allow(dead_code)] // the fuzz targets use more of it than these tests do
#[path = "../../fuzz/src/lib.rs"]
mod fuzz_checks;

use fuzz_checks::{run_target, TARGETS};

/// The files under `fuzz/<folder>/<target>/`, per target, sorted; unknown subfolders fail.
fn inputs(folder: &str) -> Vec<(&'static str, PathBuf)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz")
        .join(folder);
    let Ok(entries) = std::fs::read_dir(&root) else {
        panic!("{} is missing", root.display());
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        assert!(
            TARGETS.contains(&name.as_str()) || name == "README.md",
            "{}: {name} is not a fuzz target ({TARGETS:?})",
            root.display()
        );
    }
    let mut found = Vec::new();
    for target in TARGETS {
        let Ok(files) = std::fs::read_dir(root.join(target)) else {
            continue;
        };
        let mut files: Vec<PathBuf> = files.flatten().map(|e| e.path()).collect();
        files.retain(|p| p.is_file());
        files.sort();
        found.extend(files.into_iter().map(|p| (target, p)));
    }
    found
}

/// Runs each input through its target's checks; returns one line per failure.
fn replay(inputs: &[(&'static str, PathBuf)]) -> Vec<String> {
    let mut failures = Vec::new();
    for (target, path) in inputs {
        let data = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let outcome = catch_unwind(AssertUnwindSafe(|| run_target(target, &data)));
        match outcome {
            Ok(true) => {}
            Ok(false) => failures.push(format!("{}: unknown target {target}", path.display())),
            Err(panic) => {
                let message = panic
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_default();
                let first_line = message.lines().next().unwrap_or("").to_string();
                failures.push(format!("{} ({target}): {first_line}", path.display()));
            }
        }
    }
    failures
}

#[test]
fn every_saved_fuzz_reproducer_passes_its_checks() {
    let inputs = inputs("regressions");
    assert!(
        !inputs.is_empty(),
        "no reproducers found under fuzz/regressions"
    );
    let failures = replay(&inputs);
    assert!(
        failures.is_empty(),
        "{} of {} reproducers still fail:\n{}",
        failures.len(),
        inputs.len(),
        failures.join("\n")
    );
}

#[test]
fn every_fuzz_seed_passes_its_checks() {
    let inputs = inputs("seeds");
    for target in TARGETS {
        assert!(
            inputs.iter().any(|(t, _)| *t == target),
            "no seeds for fuzz target {target}"
        );
    }
    let failures = replay(&inputs);
    assert!(
        failures.is_empty(),
        "{} of {} seeds fail:\n{}",
        failures.len(),
        inputs.len(),
        failures.join("\n")
    );
}

/// The checks themselves can fail: a response that lies about its length is caught.
#[test]
fn the_message_walker_refuses_broken_framing() {
    let mut good = vec![0x12, 0x34, 0x81, 0x00, 0, 1, 0, 1, 0, 0, 0, 0];
    good.extend_from_slice(b"\x01a\x00\x00\x01\x00\x01");
    good.extend_from_slice(&[0xC0, 12, 0, 1, 0, 1, 0, 0, 0, 60, 0, 4, 192, 0, 2, 1]);
    assert_eq!(fuzz_checks::walk_message(&good), Ok(()));
    let mut long_rdata = good.clone();
    let at = long_rdata.len() - 5;
    long_rdata[at] = 5;
    assert!(fuzz_checks::walk_message(&long_rdata).is_err());
    let mut forward_pointer = good.clone();
    forward_pointer[20] = 40;
    assert!(fuzz_checks::walk_message(&forward_pointer).is_err());
    assert!(fuzz_checks::walk_message(&good[..good.len() - 1]).is_err());
}
