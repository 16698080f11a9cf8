//! The taster (the "food taster"): a sacrificial child process that loads every change before
//! the serving process does. The server re-executes its own binary (`steerdns taste`, hidden)
//! with the same config path and overrides, hands it the candidate control text on stdin, and
//! waits under a wall-clock deadline; the child runs under memory (RLIMIT_AS) and CPU-time
//! (RLIMIT_CPU) limits, dies with the server (PR_SET_PDEATHSIG) and never dumps core. Only
//! when the child answers "ok" does the server build its own snapshot from the same bytes. A
//! crash, abort, timeout or out-of-memory in the child is a [`Refused`] with the reason
//! ("taster killed by signal 6 (SIGABRT)", "taster exceeded 2 s"); only the child died.
//!
//! The child tells the server a [`fingerprint`] of what it read (config file, zone files and
//! their includes, geo database, control text); the server compares it with its own load, so
//! that a file edited between the two loads is never served untasted.
//!
//! `STEERDNS_TASTER_FAULT=abort:<text>` (also `spin:<text>`, `oom:<text>`) makes the *child*
//! abort (busy-loop, allocate without end) when the candidate control text, the config file or
//! a file of the zone directory contains `<text>`: the fault drill, for control changes and for
//! config/zone bundles alike. Only [`child`] reads it; the serving process never acts on it.
//!
//! Owns the process boundary and its protocol. Uses the config and the snapshot loader; knows
//! nothing of the reloader's state (`reload` calls in, never the other way).

pub mod child;

use std::ffi::OsString;
use std::io::{Read, Write};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::config::{Config, TasterConfig};
use crate::snapshot::Compiled;

/// The environment variable of the fault drill (read by the child only).
pub const FAULT_ENV: &str = "STEERDNS_TASTER_FAULT";

/// Most of the child's stdout (one JSON line) and stderr (a panic or allocation message)
/// that is kept.
const OUTPUT_LIMIT: u64 = 1 << 20;

/// A taste that went well: the child loaded the change completely.
#[derive(Debug, Clone)]
pub struct Tasted {
    /// What the child read (see [`fingerprint`]).
    pub fingerprint: u64,
    /// Spawn to verdict, as the server saw it.
    pub elapsed: Duration,
    pub scope: Scope,
}

/// Why the taster refused a change.
#[derive(Debug, Clone, thiserror::Error)]
pub enum Refused {
    /// The change is invalid: the same lines an in-process load gives.
    #[error("{}", .0.join("; "))]
    Problems(Vec<String>),
    /// The child died of a signal: abort, segfault, the CPU limit (SIGXCPU), ...
    #[error("taster killed by signal {signal} ({name}){detail}")]
    Killed {
        signal: i32,
        name: &'static str,
        detail: String,
    },
    /// The child ran past the wall-clock limit and was killed.
    #[error("taster exceeded {limit} (limit [taster] timeout_ms = {ms}); killed it")]
    TimedOut { limit: String, ms: u64 },
    /// The child exited with a status other than ok / problems (a panic exits 101).
    #[error("taster exited with status {code}{detail}")]
    Exited { code: i32, detail: String },
    /// The child could not be started, or said something that is not a verdict.
    #[error("taster failed: {0}")]
    Broken(String),
}

impl Refused {
    /// The reasons as refusal lines (status, logs).
    pub fn reasons(&self) -> Vec<String> {
        match self {
            Refused::Problems(lines) => lines.clone(),
            other => vec![other.to_string()],
        }
    }

    /// The metrics label of this outcome.
    pub fn outcome(&self) -> Outcome {
        match self {
            Refused::Problems(_) => Outcome::Problems,
            Refused::TimedOut { .. } => Outcome::TimedOut,
            Refused::Killed { .. } | Refused::Exited { .. } | Refused::Broken(_) => {
                Outcome::Crashed
            }
        }
    }
}

/// How a taste ended, for counting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Ok,
    /// The change was invalid (an ordinary refusal, found by the child).
    Problems,
    /// The child crashed, aborted, ran out of memory or CPU time, or could not start.
    Crashed,
    TimedOut,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Ok => "ok",
            Outcome::Problems => "problems",
            Outcome::Crashed => "crashed",
            Outcome::TimedOut => "timeout",
        }
    }
}

/// The taster's part of `/v1/status` (and of `/metrics`).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct TasterStatus {
    /// `child process`, `off` (`[taster] enabled = false`) or `in-process` (no program to run).
    pub mode: String,
    pub timeout_ms: u64,
    pub memory_mb: u64,
    pub cpu_secs: u64,
    /// Tastes by outcome.
    pub ok: u64,
    pub problems: u64,
    pub crashed: u64,
    pub timed_out: u64,
    /// How long the last taste took (spawn to verdict), in ms.
    pub last_ms: f64,
    /// The last taste's outcome and, for a refusal, its reason.
    pub last_result: Option<String>,
}

impl TasterStatus {
    /// Counts one taste.
    pub fn count(&mut self, result: &Result<Tasted, Refused>, elapsed: Duration) {
        let outcome = match result {
            Ok(_) => Outcome::Ok,
            Err(refused) => refused.outcome(),
        };
        match outcome {
            Outcome::Ok => self.ok += 1,
            Outcome::Problems => self.problems += 1,
            Outcome::Crashed => self.crashed += 1,
            Outcome::TimedOut => self.timed_out += 1,
        }
        self.last_ms = elapsed.as_secs_f64() * 1000.0;
        self.last_result = Some(match result {
            Ok(tasted) => match tasted.scope {
                Scope::Full => "ok: loaded everything".to_string(),
                Scope::Steering => "ok: loaded all but the zones (shared)".to_string(),
                Scope::Difference => {
                    "ok: loaded all but the zones, and parsed the changed lines of the zone files"
                        .to_string()
                }
            },
            Err(Refused::Problems(lines)) => format!("problems: {} line(s)", lines.len()),
            Err(refused) => format!("{}: {refused}", outcome.as_str()),
        });
    }

    /// Sets the mode and limits from the config in force.
    pub fn configure(&mut self, settings: &TasterConfig, program: Option<&Path>) {
        self.mode = match (settings.enabled, program) {
            (false, _) => "off".to_string(),
            (true, None) => "in-process".to_string(),
            (true, Some(_)) => "child process".to_string(),
        };
        self.timeout_ms = settings.timeout_ms;
        self.memory_mb = settings.memory_mb;
        self.cpu_secs = settings.cpu_secs;
    }
}

/// The program that tastes: this very binary. `/proc/self/exe` names the running image even
/// after an upgrade replaced the file on disk, so the taster always runs the serving code.
pub fn this_program() -> Option<PathBuf> {
    let proc_exe = Path::new("/proc/self/exe");
    if proc_exe.exists() {
        return Some(proc_exe.to_path_buf());
    }
    std::env::current_exe().ok()
}

/// What the child loads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// Everything: config, zones, geo database, policies, control.
    Full,
    /// The config, geo database, policies and control, not the zones: for a change the
    /// server will load by sharing the zones it serves (see
    /// [`crate::snapshot::load::load_steering`]). Its fingerprint is [`steering_fingerprint`].
    Steering,
    /// As [`Scope::Steering`], and the changed lines of the zone files the server applies as
    /// a difference ([`taste_difference`]).
    Difference,
}

/// Runs `program taste <args>` with `control` on stdin under `settings`' limits and returns
/// its verdict. Never panics; every failure of the child or of talking to it is a [`Refused`].
pub fn taste(
    program: &Path,
    settings: &TasterConfig,
    args: &[OsString],
    control: Option<&str>,
    scope: Scope,
) -> Result<Tasted, Refused> {
    let mut command = Command::new(program);
    command.arg0("steerdns-taster").arg("taste").args(args);
    if control.is_some() {
        command.arg("--control-stdin");
    }
    if scope == Scope::Steering {
        command.arg("--steering-only");
    }
    run(command, settings, control, scope)
}

/// Runs `program taste <args> --difference-stdin` with the control text and `windows` on
/// stdin (one JSON value, [`child::DifferenceBatch`]): the child loads the steering (as
/// [`Scope::Steering`]) and parses the changed lines of the zone files (`windows`, see
/// `crate::snapshot::load::difference_windows`) that the server will apply as a difference
/// — the lines themselves, so the child reads no zone file. Its fingerprint is
/// [`steering_fingerprint`]'s.
pub fn taste_difference(
    program: &Path,
    settings: &TasterConfig,
    args: &[OsString],
    control: Option<&str>,
    windows: &[crate::snapshot::load::TasteWindow],
) -> Result<Tasted, Refused> {
    let batch = child::DifferenceBatch {
        control: control.map(str::to_string),
        windows: windows.to_vec(),
    };
    let input = serde_json::to_string(&batch)
        .map_err(|e| Refused::Broken(format!("cannot write the changed lines: {e}")))?;
    let mut command = Command::new(program);
    command
        .arg0("steerdns-taster")
        .arg("taste")
        .args(args)
        .arg("--difference-stdin");
    run(command, settings, Some(&input), Scope::Difference)
}

/// Runs `program taste <args> --tenants-stdin` with `batch` on stdin under `settings`'
/// limits: the child parses and compiles each tenant document against the platform.
pub fn taste_tenants(
    program: &Path,
    settings: &TasterConfig,
    args: &[OsString],
    batch: &child::TenantBatch,
) -> Result<Tasted, Refused> {
    let input = serde_json::to_string(batch)
        .map_err(|e| Refused::Broken(format!("cannot write the tenant batch: {e}")))?;
    let mut command = Command::new(program);
    command
        .arg0("steerdns-taster")
        .arg("taste")
        .args(args)
        .arg("--tenants-stdin");
    run(command, settings, Some(&input), Scope::Steering)
}

/// Runs `command` as a taster child: limits, deadline, verdict.
fn run(
    mut command: Command,
    settings: &TasterConfig,
    control: Option<&str>,
    scope: Scope,
) -> Result<Tasted, Refused> {
    let started = Instant::now();
    command
        .stdin(if control.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        // The child's own log lines would only repeat what its verdict says.
        .env("STEERDNS_LOG", "error");
    // The child sets its own limits first thing, before it reads a byte of input
    // ([`apply_own_limits`]): with no pre-exec hook the standard library spawns it with
    // posix_spawn (vfork), not fork, so a server holding a million tenants does not copy its
    // page tables (and fault them back in) for every taste.
    let memory = settings.memory_mb.saturating_mul(1 << 20);
    command.env(LIMITS_ENV, format!("{memory},{}", settings.cpu_secs));
    let program = PathBuf::from(command.get_program());
    let mut child = command
        .spawn()
        .map_err(|e| Refused::Broken(format!("cannot start {}: {e}", program.display())))?;
    // Stdin is written, stdout and stderr read, each on its own thread: a child that never
    // reads its input or floods its output cannot block the deadline below.
    let writer = match (child.stdin.take(), control) {
        (Some(mut stdin), Some(text)) => {
            let text = text.to_string();
            Some(std::thread::spawn(move || {
                // A child that dies early closes the pipe; its exit status says why.
                let _ = stdin.write_all(text.as_bytes());
            }))
        }
        _ => None,
    };
    let (stdout_tx, stdout_rx) = mpsc::channel();
    let stdout = child.stdout.take();
    std::thread::spawn(move || {
        let mut bytes = Vec::new();
        if let Some(out) = stdout {
            let _ = out.take(OUTPUT_LIMIT).read_to_end(&mut bytes);
        }
        let _ = stdout_tx.send(bytes);
    });
    let stderr = child.stderr.take();
    let stderr_reader = std::thread::spawn(move || {
        let mut bytes = Vec::new();
        if let Some(err) = stderr {
            let _ = err.take(OUTPUT_LIMIT).read_to_end(&mut bytes);
        }
        bytes
    });
    let limit = Duration::from_millis(settings.timeout_ms);
    let deadline = started + limit;
    // The child closes stdout when it exits (or dies): wait for that, then for its status.
    let stdout = stdout_rx.recv_timeout(limit).ok();
    let status = match stdout {
        Some(_) => wait_until(&mut child, deadline),
        None => None,
    };
    let status = match status {
        Some(status) => status,
        None => {
            let _ = child.kill();
            let _ = child.wait();
            return Err(Refused::TimedOut {
                limit: seconds(limit),
                ms: settings.timeout_ms,
            });
        }
    };
    if let Some(writer) = writer {
        let _ = writer.join();
    }
    let stderr = stderr_reader.join().unwrap_or_default();
    let detail = stderr_detail(&stderr, settings);
    let verdict = stdout.unwrap_or_default();
    if let Some(signal) = status.signal() {
        return Err(Refused::Killed {
            signal,
            name: signal_name(signal),
            detail: match signal {
                libc::SIGXCPU => format!(": CPU limit of {} s exceeded{detail}", settings.cpu_secs),
                _ => detail,
            },
        });
    }
    let verdict: Option<child::Verdict> = std::str::from_utf8(&verdict)
        .ok()
        .and_then(|text| text.lines().next())
        .and_then(|line| serde_json::from_str(line).ok());
    match (status.code(), verdict) {
        (Some(0), Some(child::Verdict::Ok { fingerprint, .. })) => {
            let fingerprint = u64::from_str_radix(&fingerprint, 16)
                .map_err(|_| Refused::Broken(format!("bad fingerprint {fingerprint:?}")))?;
            Ok(Tasted {
                fingerprint,
                elapsed: started.elapsed(),
                scope,
            })
        }
        (Some(1), Some(child::Verdict::Problems { problems })) => Err(Refused::Problems(problems)),
        (Some(code), _) => Err(Refused::Exited { code, detail }),
        (None, _) => Err(Refused::Broken("no exit status".to_string())),
    }
}

/// How the server passes the child its limits: `<memory bytes>,<cpu seconds>`.
pub const LIMITS_ENV: &str = "STEERDNS_TASTER_LIMITS";

/// In the taster child, before it reads any input: the limits the server asked for in
/// [`LIMITS_ENV`] (none when run by hand without it). An unreadable value is an error: the
/// child must not taste unlimited.
pub fn apply_own_limits() -> std::io::Result<()> {
    let Ok(value) = std::env::var(LIMITS_ENV) else {
        return Ok(());
    };
    let parsed = value
        .split_once(',')
        .and_then(|(m, c)| Some((m.parse::<u64>().ok()?, c.parse::<u64>().ok()?)));
    let Some((memory, cpu_secs)) = parsed else {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("{LIMITS_ENV}={value:?} is not <memory bytes>,<cpu seconds>"),
        ));
    };
    limit_self(memory, cpu_secs)?;
    // The server that started us is gone already: nothing to taste for.
    // SAFETY: getppid takes no arguments and touches no memory.
    if unsafe { libc::getppid() } == 1 {
        std::process::exit(2);
    }
    Ok(())
}

/// The resource limits of this process, no core dumps, death with the parent.
/// (Uses only system calls in systemd's `@system-service` set minus `@resources`.)
fn limit_self(memory: u64, cpu_secs: u64) -> std::io::Result<()> {
    let set = |resource, soft: u64, hard: u64| {
        let limit = libc::rlimit {
            rlim_cur: soft as libc::rlim_t,
            rlim_max: hard as libc::rlim_t,
        };
        // prlimit64, not setrlimit: systemd's `SystemCallFilter=~@resources` (our unit) denies
        // the old setrlimit system call but allows prlimit64 (pid 0: this process).
        // SAFETY: prlimit reads the struct passed by reference and writes nothing (no old
        // limit asked for); no other memory is touched.
        if unsafe { libc::prlimit(0, resource, &limit, std::ptr::null_mut()) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(())
    };
    set(libc::RLIMIT_AS, memory, memory)?;
    // SIGXCPU at the soft limit (a clear reason), SIGKILL a second later if ignored.
    set(libc::RLIMIT_CPU, cpu_secs, cpu_secs.saturating_add(1))?;
    set(libc::RLIMIT_CORE, 0, 0)?;
    // SAFETY: prctl with PR_SET_PDEATHSIG takes a signal number and touches no memory.
    unsafe {
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
    }
    Ok(())
}

/// Waits for `child` until `deadline`; `None` if it is still running then.
fn wait_until(
    child: &mut std::process::Child,
    deadline: Instant,
) -> Option<std::process::ExitStatus> {
    let mut pause = Duration::from_micros(100);
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return Some(status),
            Ok(None) => {}
            Err(_) => return None,
        }
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(10));
    }
}

/// The last lines the child wrote to stderr (a panic message, "memory allocation of N bytes
/// failed"), as " — ..." for a reason; empty if it wrote nothing.
fn stderr_detail(stderr: &[u8], settings: &TasterConfig) -> String {
    let text = String::from_utf8_lossy(stderr);
    // What comes after a backtrace header is frames, not reasons.
    let lines: Vec<&str> = text
        .lines()
        .map(str::trim)
        .take_while(|l| !l.starts_with("stack backtrace:"))
        .filter(|l| !l.is_empty() && !l.starts_with("note: run with `RUST_BACKTRACE"))
        .collect();
    if lines.is_empty() {
        return String::new();
    }
    let tail: Vec<String> = lines[lines.len().saturating_sub(3)..]
        .iter()
        .map(|l| l.chars().take(300).collect())
        .collect();
    let mut detail = format!(": {}", tail.join(" | "));
    if text.contains("memory allocation of") {
        detail.push_str(&format!(
            " (out of memory: limit [taster] memory_mb = {})",
            settings.memory_mb
        ));
    }
    detail
}

fn seconds(d: Duration) -> String {
    let secs = d.as_secs_f64();
    if secs.fract() == 0.0 {
        format!("{secs:.0} s")
    } else {
        format!("{secs:.1} s")
    }
}

fn signal_name(signal: i32) -> &'static str {
    match signal {
        libc::SIGABRT => "SIGABRT",
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGBUS => "SIGBUS",
        libc::SIGILL => "SIGILL",
        libc::SIGFPE => "SIGFPE",
        libc::SIGKILL => "SIGKILL",
        libc::SIGTERM => "SIGTERM",
        libc::SIGXCPU => "SIGXCPU",
        libc::SIGPIPE => "SIGPIPE",
        _ => "signal",
    }
}

/// What a load read, as one number: the config and zone files (through the snapshot's
/// sources), the geo database (length and modification time) and the control text. The
/// child's and the server's loads of one change must agree on it.
pub fn fingerprint(config: &Config, compiled: &Compiled, control: Option<&str>) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::hash::DefaultHasher::new();
    compiled
        .sources()
        .map(|s| s.fingerprint())
        .hash(&mut hasher);
    hash_control_and_geo(&mut hasher, config, control);
    hasher.finish()
}

/// What a [`Scope::Steering`] taste read and found, as one number: the config file's digest,
/// the steered names the change binds, the geo database and the control text. Equal to the
/// same function of the served snapshot's sources when the server can share its zones.
pub fn steering_fingerprint(
    config_digest: Option<&crate::files::Digest>,
    steered: &[Box<[u8]>],
    config: &Config,
    control: Option<&str>,
) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::hash::DefaultHasher::new();
    config_digest.hash(&mut hasher);
    steered.hash(&mut hasher);
    hash_control_and_geo(&mut hasher, config, control);
    hasher.finish()
}

fn hash_control_and_geo(
    hasher: &mut std::hash::DefaultHasher,
    config: &Config,
    control: Option<&str>,
) {
    use std::hash::Hash;
    control.hash(hasher);
    if let Some(database) = &config.geo.database {
        let meta = std::fs::metadata(config.base_dir.join(database)).ok();
        meta.as_ref().map(|m| m.len()).hash(hasher);
        meta.and_then(|m| m.modified().ok()).hash(hasher);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stderr_detail_keeps_the_last_lines_and_names_the_memory_limit() {
        let settings = TasterConfig::default();
        assert_eq!(stderr_detail(b"", &settings), "");
        let panic = b"\nthread 'main' panicked at src/x.rs:1:1:\nboom\nnote: run with `RUST_BACKTRACE=1` environment variable to display a backtrace\n";
        assert_eq!(
            stderr_detail(panic, &settings),
            ": thread 'main' panicked at src/x.rs:1:1: | boom"
        );
        let oom = b"memory allocation of 67108864 bytes failed\nstack backtrace:\n  0: std::x\n";
        let detail = stderr_detail(oom, &settings);
        assert!(detail.contains("memory allocation of 67108864 bytes failed"));
        assert!(detail.contains("memory_mb = 4096"), "{detail}");
        assert!(!detail.contains("std::x"), "{detail}");
    }

    #[test]
    fn timeouts_read_in_seconds() {
        assert_eq!(seconds(Duration::from_millis(2000)), "2 s");
        assert_eq!(seconds(Duration::from_millis(1500)), "1.5 s");
        let refused = Refused::TimedOut {
            limit: "2 s".into(),
            ms: 2000,
        };
        assert!(refused.to_string().starts_with("taster exceeded 2 s"));
        assert_eq!(refused.outcome(), Outcome::TimedOut);
    }

    #[test]
    fn a_program_that_cannot_start_is_a_refusal() {
        let refused = taste(
            Path::new("/nonexistent/steerdns"),
            &TasterConfig::default(),
            &[],
            Some("x"),
            Scope::Full,
        )
        .unwrap_err();
        assert_eq!(refused.outcome(), Outcome::Crashed);
        assert!(refused.to_string().contains("cannot start"), "{refused}");
    }

    /// The parent side against stand-in children (`sh`): every way a child can end.
    #[test]
    fn every_way_a_child_ends_is_a_verdict() {
        let sh = Path::new("/bin/sh");
        let settings = TasterConfig {
            timeout_ms: 500,
            ..TasterConfig::default()
        };
        let child = |script: &str| {
            let mut command = Command::new(sh);
            command.arg("-c").arg(script);
            run(command, &settings, Some("control text"), Scope::Full)
        };
        let killed = child("kill -ABRT $$").unwrap_err();
        assert!(
            killed
                .to_string()
                .starts_with("taster killed by signal 6 (SIGABRT)"),
            "{killed}"
        );
        let timed_out = child("sleep 5").unwrap_err();
        assert_eq!(timed_out.outcome(), Outcome::TimedOut, "{timed_out}");
        let exited = child("echo boom >&2; exit 101").unwrap_err();
        assert_eq!(exited.to_string(), "taster exited with status 101: boom");
        let problems =
            child(r#"echo '{"verdict":"problems","problems":["a:1: bad"]}'; exit 1"#).unwrap_err();
        assert_eq!(problems.reasons(), ["a:1: bad"]);
        let ok = child(r#"cat >/dev/null; echo '{"verdict":"ok","fingerprint":"ff","ms":1.0}'"#)
            .expect("ok");
        assert_eq!(ok.fingerprint, 0xff);
        let nonsense = child("echo hello").unwrap_err();
        assert_eq!(nonsense.outcome(), Outcome::Crashed, "{nonsense}");
    }
}
