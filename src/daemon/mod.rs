//! The server as a library object: [`Daemon::load`] reads the configuration and builds the
//! first snapshot, [`Loaded::bind`] binds every socket (port 0 allowed; the addresses are read
//! back), [`Daemon::start`] starts serving on them under one [`Supervisor`], and
//! [`Daemon::stop`] stops and joins everything. Nothing here prints: the binary prints the
//! lines people (and the process tests) read, from the typed addresses returned.

pub mod supervisor;

use std::net::SocketAddr;
use std::sync::Arc;

use crate::admin::{AdminState, AdminToken, AllowedHosts};
use crate::config::Config;
use crate::dns::wire::Transport;
use crate::fleet::origin::FleetOrigin;
use crate::reload::{ControlOrigin, FileOrigin, Reloader, Source};
use crate::server::{BindError, UdpWorkers};
pub use supervisor::{Shutdown, Supervisor, SupervisorStatus};

/// Why the daemon did not start.
#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    #[error(transparent)]
    Config(#[from] crate::reload::SourceError),
    #[error("refusing to start: {} problem(s) in config, zones or control file", .0.len())]
    Refused(Vec<String>),
    #[error(transparent)]
    Bind(#[from] BindError),
    #[error("{what}: {source}")]
    Io {
        what: String,
        source: std::io::Error,
    },
    #[error("DoQ endpoint: {0}")]
    Quic(#[from] crate::server::encrypted::quic::QuicError),
}

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> DaemonError {
    let what = what.into();
    move |source| DaemonError::Io { what, source }
}

/// The admin endpoint: where the config puts it, at an address given, or none.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum AdminSetting {
    #[default]
    FromConfig,
    At(SocketAddr),
    Off,
}

/// What the daemon starts from: the config source and the command line's overrides.
#[derive(Debug, Clone, Default)]
pub struct Settings {
    pub source: Source,
    /// Replaces `[server] listen` when not empty.
    pub listen: Vec<SocketAddr>,
    pub admin: AdminSetting,
}

/// A fleet node's settings, its name and its control origin (etcd).
pub struct FleetNode {
    pub config: crate::config::fleet::FleetConfig,
    pub name: String,
    pub origin: Arc<FleetOrigin>,
    /// The one etcd client all of this node's fleet tasks share.
    pub link: Arc<crate::fleet::session::Link>,
}

/// The configuration read and the first snapshot built, nothing bound or serving yet.
pub struct Loaded {
    pub config: Config,
    pub reloader: Arc<Reloader>,
    /// Warnings from the first load.
    pub warnings: Vec<String>,
    pub fleet: Option<FleetNode>,
    admin: AdminSetting,
    supervisor: Supervisor,
}

/// One DNS listen address bound: its UDP sockets (one per worker) and TCP listener.
pub struct DnsSockets {
    pub addr: SocketAddr,
    pub workers: usize,
    bound: crate::server::Bound,
}

/// Every socket of the daemon, bound, with the addresses they got.
pub struct Bound {
    pub dns: Vec<DnsSockets>,
    pub encrypted: Vec<(Transport, SocketAddr)>,
    pub admin: Option<SocketAddr>,
    dot: Vec<std::net::TcpListener>,
    doh: Vec<std::net::TcpListener>,
    doq: Vec<std::net::UdpSocket>,
    admin_listener: Option<std::net::TcpListener>,
}

/// A running daemon.
pub struct Daemon {
    pub dns: Vec<SocketAddr>,
    pub admin: Option<SocketAddr>,
    pub encrypted: Vec<(Transport, SocketAddr)>,
    /// Where the `[[drills]]` schedule asks, when it runs.
    pub drills: Option<crate::drill::Endpoints>,
    reloader: Arc<Reloader>,
    token: Option<Arc<AdminToken>>,
    supervisor: Supervisor,
}

impl Daemon {
    /// Reads the configuration and builds the first snapshot (the control file refused at
    /// startup is logged and in status; the server starts on the last good one).
    pub fn load(settings: Settings) -> Result<Loaded, DaemonError> {
        let Settings {
            source,
            listen,
            admin,
        } = settings;
        let mut config = source.read_config().map_err(DaemonError::Config)?;
        crate::safety::tally::configure(&config.safety);
        crate::drill::log::configure(&config);
        if !listen.is_empty() {
            config.server.listen = listen;
        }
        if let AdminSetting::At(addr) = admin {
            config.admin.listen = addr;
        }
        // Fleet mode: the control text comes from etcd (the control file is this node's cache).
        let fleet = config.fleet.clone().map(|fleet| {
            let name = crate::fleet::node_name(&config);
            let origin = FleetOrigin::new(&name, &fleet.prefix, &fleet.etcd);
            if let Some(paths) = crate::fleet::direct::paths(&config) {
                origin.restore_direct(paths);
            }
            FleetNode {
                link: Arc::new(crate::fleet::session::Link::new(fleet.clone())),
                config: fleet,
                name,
                origin,
            }
        });
        let origin: Arc<dyn ControlOrigin> = match &fleet {
            Some(node) => Arc::new(crate::fleet::origin::Origin(node.origin.clone())),
            None => Arc::new(FileOrigin),
        };
        let (reloader, warnings) =
            Reloader::start_with(source, origin).map_err(DaemonError::Refused)?;
        if let Some(refusal) = &reloader.status().last_refusal {
            for reason in &refusal.reasons {
                tracing::error!("control file refused at startup: {reason}");
            }
        }
        // The tenants are in before the first whole snapshot serves (the reloader loads them
        // just before that swap; on a start from the zone cache, phase 1 holds their names
        // until then).
        let supervisor = Supervisor::new().map_err(io("starting the async runtime"))?;
        Ok(Loaded {
            config,
            reloader,
            warnings,
            fleet,
            admin,
            supervisor,
        })
    }

    /// Starts serving on `bound` (from [`Loaded::bind`]).
    pub fn start(loaded: Loaded, bound: Bound) -> Result<Daemon, DaemonError> {
        let Loaded {
            config,
            reloader,
            fleet,
            mut supervisor,
            ..
        } = loaded;
        let snapshot = reloader.snapshot().clone();
        let dns: Vec<SocketAddr> = bound.dns.iter().map(|d| d.addr).collect();
        let mut ports = Vec::new();
        for sockets in bound.dns {
            let addr = sockets.addr;
            ports.push(addr.port());
            let udp = UdpWorkers::start(sockets.bound.udp, &snapshot)
                .map_err(io(format!("udp workers on {addr}")))?;
            supervisor.on_stop(format!("udp {addr}"), move || udp.stop());
            let tcp = {
                let _guard = supervisor.handle().enter();
                tokio::net::TcpListener::from_std(sockets.bound.tcp)
                    .map_err(io(format!("tcp on {addr}")))?
            };
            let limits = crate::server::tcp::TcpLimits::from_config(&config.server.tcp);
            let serving = crate::server::tcp::serve(tcp, snapshot.clone(), limits);
            supervisor.spawn_task(format!("tcp {addr}"), serving);
        }
        start_encrypted(
            &config,
            &mut supervisor,
            &snapshot,
            bound.dot,
            bound.doh,
            bound.doq,
        )?;
        if let Some(xdp) = start_xdp(&config, ports, &snapshot) {
            supervisor.on_stop("xdp", move || xdp.stop());
        }
        let mut token = None;
        if let Some(listener) = bound.admin_listener {
            let local = bound.admin.unwrap_or(config.admin.listen);
            let admin = {
                let _guard = supervisor.handle().enter();
                tokio::net::TcpListener::from_std(listener)
                    .map_err(io(format!("admin endpoint on {local}")))?
            };
            let admin_token = Arc::new(AdminToken::open(config.admin.token_file.clone()));
            token = Some(admin_token.clone());
            let state = AdminState {
                reloader: reloader.clone(),
                token: admin_token,
                hosts: Arc::new(AllowedHosts::new(local, &config.admin.allowed_hosts)),
                fleet: fleet.as_ref().map(|node| node.origin.clone()),
                supervisor: supervisor.status(),
            };
            let limits = crate::admin::connections::ConnectionLimits::from_config(&config.admin);
            supervisor.spawn_task("admin", crate::admin::serve(admin, state, limits));
        }
        init_descriptor_budget(&config.admin);
        let drills = start_drill_schedule(&reloader, bound.admin, &dns);
        start_background(
            &config,
            &reloader,
            fleet,
            &mut supervisor,
            &dns,
            bound.admin,
        )?;
        Ok(Daemon {
            dns,
            admin: bound.admin,
            encrypted: bound.encrypted,
            drills,
            reloader,
            token,
            supervisor,
        })
    }

    /// The reloader (status, reload, snapshot).
    pub fn reloader(&self) -> &Arc<Reloader> {
        &self.reloader
    }

    /// The admin token (re-read on SIGHUP), when the admin endpoint runs.
    pub fn admin_token(&self) -> Option<&Arc<AdminToken>> {
        self.token.as_ref()
    }

    /// The supervisor (its runtime, its status).
    pub fn supervisor(&self) -> &Supervisor {
        &self.supervisor
    }

    /// Stops every part and joins it; the status says how many still run (0) and whether any
    /// ended unexpectedly.
    pub fn stop(self) -> Arc<SupervisorStatus> {
        self.supervisor.stop()
    }
}

impl Loaded {
    /// Binds the DNS listen addresses (UDP and TCP), the encrypted transports and the admin
    /// endpoint; port 0 gets a free port, read back in the addresses returned.
    pub fn bind(&self) -> Result<Bound, DaemonError> {
        let config = &self.config;
        let workers = config.udp_workers();
        let mut dns = Vec::new();
        for addr in &config.server.listen {
            let bound = crate::server::bind(*addr, workers)?;
            dns.push(DnsSockets {
                addr: bound.addr,
                workers,
                bound,
            });
        }
        let mut encrypted = Vec::new();
        let (mut dot, mut doh, mut doq) = (Vec::new(), Vec::new(), Vec::new());
        if let Some(tls) = &config.server.tls {
            for addr in &tls.dot {
                let listener = crate::server::bind_stream(*addr)?;
                encrypted.push((Transport::Tls, local(&listener, *addr)?));
                dot.push(listener);
            }
            for addr in &tls.doh {
                let listener = crate::server::bind_stream(*addr)?;
                encrypted.push((Transport::Https, local(&listener, *addr)?));
                doh.push(listener);
            }
            for addr in &tls.doq {
                let socket = crate::server::bind_datagram(*addr)?;
                let at = socket.local_addr().map_err(io(format!("doq on {addr}")))?;
                encrypted.push((Transport::Quic, at));
                doq.push(socket);
            }
        }
        let (admin, admin_listener) = match self.admin {
            AdminSetting::Off => (None, None),
            _ => {
                let at = config.admin.listen;
                let what = format!("admin endpoint on {at}");
                let listener = self
                    .supervisor
                    .block_on(tokio::net::TcpListener::bind(at))
                    .and_then(|l| l.into_std())
                    .map_err(io(what.clone()))?;
                (Some(local(&listener, at)?), Some(listener))
            }
        };
        Ok(Bound {
            dns,
            encrypted,
            admin,
            dot,
            doh,
            doq,
            admin_listener,
        })
    }
}

fn local(listener: &std::net::TcpListener, addr: SocketAddr) -> Result<SocketAddr, DaemonError> {
    listener
        .local_addr()
        .map_err(io(format!("listening on {addr}")))
}

/// Starts the encrypted transports of `[server.tls]` on their bound sockets.
fn start_encrypted(
    config: &Config,
    supervisor: &mut Supervisor,
    snapshot: &crate::snapshot::SharedSnapshot,
    dot: Vec<std::net::TcpListener>,
    doh: Vec<std::net::TcpListener>,
    doq: Vec<std::net::UdpSocket>,
) -> Result<(), DaemonError> {
    use crate::metrics::encrypted::add_listener;
    use crate::server::encrypted::{self, Limits};
    let Some(tls) = &config.server.tls else {
        return Ok(());
    };
    let limits = Limits::from_config(tls, &config.server.tcp);
    let _guard = supervisor.handle().clone();
    let _entered = _guard.enter();
    let tokio_listener = |listener: std::net::TcpListener| {
        let at = listener.local_addr().map_err(io("encrypted listener"))?;
        let listener = tokio::net::TcpListener::from_std(listener).map_err(io(format!("{at}")))?;
        Ok::<_, DaemonError>((at, listener))
    };
    for listener in dot {
        let (at, listener) = tokio_listener(listener)?;
        add_listener(Transport::Tls, at);
        let serving = encrypted::serve_dot(listener, snapshot.clone(), limits.clone());
        supervisor.spawn_task(format!("dot {at}"), async move {
            if let Err(e) = serving.await {
                tracing::error!("dot stopped: {e}");
            }
        });
    }
    for listener in doh {
        let (at, listener) = tokio_listener(listener)?;
        add_listener(Transport::Https, at);
        let serving = encrypted::https::serve_doh(listener, snapshot.clone(), limits.clone());
        supervisor.spawn_task(format!("doh {at}"), async move {
            if let Err(e) = serving.await {
                tracing::error!("doh stopped: {e}");
            }
        });
    }
    for socket in doq {
        let endpoint = encrypted::quic::endpoint(socket, snapshot, &limits)?;
        let at = endpoint.local_addr().map_err(io("doq endpoint"))?;
        add_listener(Transport::Quic, at);
        let serving = encrypted::quic::serve_doq(endpoint, snapshot.clone(), limits.clone());
        supervisor.spawn_task(format!("doq {at}"), serving);
    }
    Ok(())
}

/// Starts the AF_XDP path if `[server.xdp]` asks for it; the sockets serve whatever it does
/// not take, and everything if it cannot attach (the reason is logged and in status).
fn start_xdp(
    config: &Config,
    mut listen_ports: Vec<u16>,
    snapshot: &crate::snapshot::SharedSnapshot,
) -> Option<crate::server::xdp::XdpPath> {
    let xdp = config.server.xdp.as_ref()?;
    listen_ports.sort_unstable();
    listen_ports.dedup();
    let ports = if xdp.ports.is_empty() {
        listen_ports
    } else {
        xdp.ports.clone()
    };
    crate::server::xdp::XdpPath::start_or_report(xdp, ports, snapshot)
}

/// The shield tick, DNSSEC re-signing, NOTIFY out, secondary zones, health checks, and the fleet parts or the control file
/// watch.
fn start_background(
    config: &Config,
    reloader: &Arc<Reloader>,
    fleet: Option<FleetNode>,
    supervisor: &mut Supervisor,
    listening: &[SocketAddr],
    admin: Option<SocketAddr>,
) -> Result<(), DaemonError> {
    if let Some(node) = &fleet {
        let health = &node.config.health;
        if health.probers > 0 {
            reloader.health().enable_sharing(
                &node.name,
                node.config.site.as_deref(),
                health.probers,
            );
        } else {
            reloader.health().set_node(&node.name);
        }
    }
    reloader.health().start(supervisor.handle());
    // Tenants' own monitors: each tenant's scheduler, apart from the platform's probing.
    reloader.tenants().probes().start(supervisor.handle());
    if let Some(node) = &fleet {
        // Before the shield's first tick: in fleet mode it serves only what the leader
        // publishes through etcd.
        reloader.shield().fleet.enable(&node.name);
    }
    let shield =
        crate::reload::shield::start(reloader.shield().clone(), reloader.snapshot().clone());
    supervisor
        .spawn_thread("shield", move |stop| shield(&|pause| stop.sleep(pause)))
        .map_err(io("starting the traffic shield"))?;
    let snapshots = reloader.snapshot().clone();
    supervisor
        .spawn_thread("tenant-budgets", move |stop| {
            sample_budgets(&snapshots, &|pause| stop.sleep(pause))
        })
        .map_err(io("starting the tenant budgets' sampler"))?;
    if config.tenants.auto_quarantine {
        let stores: Box<crate::reload::quarantine::TenantStores> =
            Box::new(|config| crate::admin::tenants::tenant_stores(config).map_err(|e| e.into()));
        let body = crate::reload::quarantine::run(reloader.clone(), stores);
        supervisor
            .spawn_thread("auto-quarantine", move |stop| {
                body(&|pause| stop.sleep(pause))
            })
            .map_err(io("starting automatic quarantine"))?;
    }
    let resign = crate::reload::resign::run(reloader.clone());
    supervisor
        .spawn_thread("dnssec-resign", move |stop| {
            resign(&|pause| stop.sleep(pause))
        })
        .map_err(io("starting DNSSEC re-signing"))?;
    let notifies = config.transfer.iter().flat_map(|t| t.zone.values());
    if notifies.clone().any(|z| !z.notify.is_empty()) {
        let body = crate::server::notify::run(reloader.snapshot().clone());
        supervisor
            .spawn_thread("notify", move |stop| body(&|pause| stop.sleep(pause)))
            .map_err(io("starting NOTIFY out"))?;
    }
    for zone in &config.secondary.zone {
        let body = crate::secondary::run(zone.clone(), reloader.clone());
        supervisor
            .spawn_thread(format!("secondary {}", zone.name), move |stop| {
                body(&|pause| stop.sleep(pause))
            })
            .map_err(io(format!("starting secondary zone {}", zone.name)))?;
    }
    for catalog in &config.secondary.catalog {
        let dir = config.secondary.dir.clone().unwrap_or_default();
        let body = crate::secondary::run_catalog(catalog.clone(), dir, reloader.clone());
        supervisor
            .spawn_thread(format!("catalog {}", catalog.name), move |stop| {
                body(&|pause| stop.sleep(pause))
            })
            .map_err(io(format!("starting catalog zone {}", catalog.name)))?;
    }
    crate::reload::watch::spawn_tenants(reloader.clone())
        .map_err(io("starting the tenants' folder watcher"))?;
    let Some(node) = fleet else {
        if let Some(control) = &config.control.file {
            crate::reload::watch::spawn(reloader.clone(), control.clone())
                .map_err(io("starting the control file watcher"))?;
        }
        return Ok(());
    };
    let info = crate::fleet::node::NodeInfo {
        name: node.name.clone(),
        nsid: config.server.nsid.clone(),
        identity: config.server.identity.clone(),
        listen: listening.to_vec(),
        admin,
    };
    // One etcd client for every fleet part of this node (crate::fleet::session::Link).
    let link = node.link;
    if let Some(plan) = link.config().rollout.clone() {
        let part = crate::fleet::coordinator::task(
            link.clone(),
            plan,
            info.name.clone(),
            node.origin.clone(),
        );
        supervisor.spawn_task("fleet coordinator", part);
    }
    let shield = reloader.shield().clone();
    let part = crate::fleet::shield::task(link.clone(), info.name.clone(), shield);
    supervisor.spawn_task("fleet shield", part);
    if link.config().health.probers > 0 {
        let health = reloader.health().clone();
        let part = crate::fleet::health::task(link.clone(), health, info.name.clone());
        supervisor.spawn_task("fleet health", part);
    }
    let part = crate::fleet::node::task(link, reloader.clone(), node.origin, info);
    supervisor.spawn_task("fleet node", part);
    Ok(())
}

/// The `[[drills]]` schedule, asking this server over its first listen address (an
/// unspecified one through loopback) and its admin endpoint.
fn start_drill_schedule(
    reloader: &Arc<Reloader>,
    admin: Option<SocketAddr>,
    listening: &[SocketAddr],
) -> Option<crate::drill::Endpoints> {
    let loopback = |mut addr: SocketAddr| {
        if addr.ip().is_unspecified() {
            addr.set_ip(match addr {
                SocketAddr::V4(_) => std::net::Ipv4Addr::LOCALHOST.into(),
                SocketAddr::V6(_) => std::net::Ipv6Addr::LOCALHOST.into(),
            });
        }
        addr
    };
    let (Some(admin), Some(dns)) = (admin, listening.first()) else {
        return None;
    };
    let at = crate::drill::Endpoints {
        admin: loopback(admin),
        dns: loopback(*dns),
    };
    let reloader = reloader.clone();
    crate::drill::schedule::start(move || reloader.source().read_config().ok(), at)?;
    Some(at)
}

/// The listeners' shared descriptor budget ([`crate::descriptors`]), once they are bound.
fn init_descriptor_budget(admin: &crate::config::admin::AdminConfig) {
    match crate::descriptors::init(admin.descriptor_reserve, admin.max_connections) {
        Some((limit, share)) if share < admin.max_connections => tracing::warn!(
            "file descriptors: limit {limit}; the admin endpoint holds at most {share} \
             connections (an eighth), not [admin] max_connections = {}",
            admin.max_connections
        ),
        Some((limit, share)) => tracing::info!(
            "file descriptors: limit {limit}, {} kept free for files, {share} for the admin \
             endpoint",
            admin.descriptor_reserve
        ),
        None => tracing::warn!(
            "cannot read RLIMIT_NOFILE: connections are not refused to keep descriptors free"
        ),
    }
}

/// The tenant budgets' sampler ([`crate::rrl::budget`]): while they are on, every
/// [`crate::rrl::budget::SAMPLE_EVERY`], the UDP queries received so far against the budgets
/// of the snapshot in service, until `sleep` says the daemon stops.
fn sample_budgets(
    snapshots: &crate::snapshot::SharedSnapshot,
    sleep: &dyn Fn(std::time::Duration) -> bool,
) {
    use crate::metrics::serving::{serving, transport_index};
    let udp = transport_index(crate::dns::wire::Transport::Udp);
    loop {
        let queries = serving().totals().queries[udp];
        let snapshot = snapshots.load();
        let limits = snapshot
            .budgets()
            .map(crate::rrl::budget::TenantBudgets::limits);
        crate::rrl::budget::load().observe(limits, queries, crate::rrl::clock::now_ms());
        // Budgets off: look again only every 2 s (a reload may turn them on), so that an
        // idle server without them is not woken ten times a second.
        let pause = match limits {
            Some(_) => crate::rrl::budget::SAMPLE_EVERY,
            None => std::time::Duration::from_secs(2),
        };
        drop(snapshot);
        if sleep(pause) {
            return;
        }
    }
}
