//! The process's file descriptors as one budget its listeners share, so that a flood on one
//! listener never takes the descriptors another needs (issue 28: 21,000 idle admin connections
//! used up every descriptor, then DNS TCP and DoT accepts failed with EMFILE and `steerdns
//! reload` could not connect).
//!
//! Why accounting and not a look at the kernel: counting `/proc/self/fd` costs a directory read
//! of every open descriptor (20,000 entries under a flood, per accept), and the kernel offers no
//! cheaper exact count. Nearly every descriptor a server under a flood holds is a connection,
//! and every listener already counts its open connections (the admin endpoint here, DNS TCP,
//! DoT and DoH in [`mod@crate::metrics::serving`]). So: the descriptors open once the listeners are
//! bound ([`init`], counted once) plus the connections open now is the estimate, and
//! `[admin] descriptor_reserve` covers what it does not see (files a reload opens, etcd, the
//! taster's pipes). With it:
//!
//! - the admin endpoint holds at most its share (`[admin] max_connections`, at most an eighth
//!   of the limit) and takes no connection that would leave fewer than the reserve free;
//! - the DNS listeners take none that would leave fewer than the reserve plus what the admin
//!   endpoint may still open (its share minus its open connections), so an operator can always
//!   reach status and reload.
//!
//! Each listener's own cap bounds it further; this is the floor under all of them. At start the
//! soft `RLIMIT_NOFILE` is raised to the hard one (as Go's runtime does): the soft default of
//! 1024 is a limit for `select(2)` users, which steerdns is not.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use serde::{Deserialize, Serialize};

/// 0 until [`init`]: nothing is refused for descriptors before the limit is known.
static LIMIT: AtomicUsize = AtomicUsize::new(0);
static BASELINE: AtomicUsize = AtomicUsize::new(0);
static RESERVE: AtomicUsize = AtomicUsize::new(0);
static ADMIN_SHARE: AtomicUsize = AtomicUsize::new(0);
static ADMIN_OPEN: AtomicUsize = AtomicUsize::new(0);
static REFUSED_DNS: AtomicU64 = AtomicU64::new(0);

/// What status and metrics show.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct DescriptorStatus {
    /// The soft `RLIMIT_NOFILE` (0: not known, nothing is refused for descriptors).
    pub limit: usize,
    /// Descriptors open at start plus connections open now.
    pub open_estimate: usize,
    /// `[admin] descriptor_reserve`.
    pub reserve: usize,
    /// Most descriptors the admin endpoint holds: `[admin] max_connections`, at most an
    /// eighth of the limit.
    pub admin_share: usize,
    /// DNS connections (TCP, DoT, DoH) closed at once because taking them would have left
    /// less than the reserve and the admin endpoint's share free (the admin endpoint's own
    /// refusals are in its connection counters).
    pub refused_dns: u64,
}

/// Raises the soft descriptor limit to the hard one, then counts what is open: call once the
/// listeners are bound. `reserve` and `admin_share` are `[admin] descriptor_reserve` and
/// `max_connections`. Returns the limit in force and the admin endpoint's share (`None`: the
/// limit could not be read, and nothing will be refused for descriptors).
pub fn init(reserve: usize, admin_connections: usize) -> Option<(usize, usize)> {
    RESERVE.store(reserve, Ordering::Relaxed);
    let limit = raise_soft_limit()?;
    let share = admin_connections.min(limit / 8).max(1);
    ADMIN_SHARE.store(share, Ordering::Relaxed);
    BASELINE.store(count_open().unwrap_or(0), Ordering::Relaxed);
    LIMIT.store(limit, Ordering::Relaxed);
    Some((limit, share))
}

/// The soft `RLIMIT_NOFILE` after raising it to the hard one (kept as it was if that fails).
fn raise_soft_limit() -> Option<usize> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: prlimit (pid 0: this process) writes the current limit into `limit`, which
    // lives for the call; prlimit64 rather than setrlimit because systemd's
    // `SystemCallFilter=~@resources` denies setrlimit (see the taster).
    if unsafe { libc::prlimit(0, libc::RLIMIT_NOFILE, std::ptr::null(), &mut limit) } != 0 {
        return None;
    }
    if limit.rlim_cur < limit.rlim_max {
        let raised = libc::rlimit {
            rlim_cur: limit.rlim_max,
            rlim_max: limit.rlim_max,
        };
        // SAFETY: as above; prlimit only reads `raised`.
        if unsafe { libc::prlimit(0, libc::RLIMIT_NOFILE, &raised, std::ptr::null_mut()) } == 0 {
            limit = raised;
        }
    }
    Some(usize::try_from(limit.rlim_cur).unwrap_or(usize::MAX))
}

/// Descriptors open now (a directory read: only at start).
fn count_open() -> Option<usize> {
    Some(std::fs::read_dir("/proc/self/fd").ok()?.count())
}

fn dns_open() -> usize {
    usize::try_from(crate::metrics::serving().connections_open()).unwrap_or(0)
}

fn open_estimate() -> usize {
    BASELINE.load(Ordering::Relaxed) + ADMIN_OPEN.load(Ordering::Relaxed) + dns_open()
}

/// Free descriptors if one more connection were taken; `None` before [`init`].
fn free_after_one() -> Option<usize> {
    let limit = LIMIT.load(Ordering::Relaxed);
    (limit > 0).then(|| limit.saturating_sub(open_estimate() + 1))
}

/// May the admin endpoint take one more connection (without closing another)?
pub fn admin_may_take() -> bool {
    let Some(free) = free_after_one() else {
        return true;
    };
    ADMIN_OPEN.load(Ordering::Relaxed) < ADMIN_SHARE.load(Ordering::Relaxed)
        && free >= RESERVE.load(Ordering::Relaxed)
}

/// May a DNS listener (TCP, DoT, DoH) take one more connection? Keeps the reserve and the
/// admin endpoint's share free. (`false` is counted.)
pub fn dns_may_take() -> bool {
    let admin_left = ADMIN_SHARE
        .load(Ordering::Relaxed)
        .saturating_sub(ADMIN_OPEN.load(Ordering::Relaxed));
    let keep = RESERVE.load(Ordering::Relaxed) + admin_left;
    let allowed = free_after_one().is_none_or(|free| free >= keep);
    if !allowed {
        REFUSED_DNS.fetch_add(1, Ordering::Relaxed);
    }
    allowed
}

/// One admin connection's descriptor, counted while it lives.
pub struct AdminDescriptor(());

impl AdminDescriptor {
    pub fn take() -> AdminDescriptor {
        ADMIN_OPEN.fetch_add(1, Ordering::Relaxed);
        AdminDescriptor(())
    }
}

impl Drop for AdminDescriptor {
    fn drop(&mut self) {
        ADMIN_OPEN.fetch_sub(1, Ordering::Relaxed);
    }
}

pub fn status() -> DescriptorStatus {
    DescriptorStatus {
        limit: LIMIT.load(Ordering::Relaxed),
        open_estimate: open_estimate(),
        reserve: RESERVE.load(Ordering::Relaxed),
        admin_share: ADMIN_SHARE.load(Ordering::Relaxed),
        refused_dns: REFUSED_DNS.load(Ordering::Relaxed),
    }
}
