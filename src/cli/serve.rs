//! `steerdns serve`: the process around [`steerdns::daemon::Daemon`] — the lines people (and
//! the process tests) read on stdout, signals (SIGHUP reloads, SIGTERM/SIGINT stop), and
//! systemd's readiness notification.

use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{Context, Result};

use steerdns::admin::AdminToken;
use steerdns::daemon::{AdminSetting, Daemon, DaemonError, Loaded, Settings};
use steerdns::dns::wire::Transport;
use steerdns::reload::{Reloader, Source, Trigger};

use super::args::{AdminListen, ServeArgs};

pub fn serve(args: ServeArgs) -> Result<ExitCode> {
    let source = Source {
        config: args.source.config.clone(),
        zones: args.source.zones.clone(),
        nsid: args.nsid.clone(),
        identity: args.identity.clone(),
        node: args.node.clone(),
        taster: steerdns::taster::this_program(),
        ..Source::default()
    };
    println!("{}", source.config_description());
    let settings = Settings {
        source,
        listen: args.listen.clone(),
        admin: match args.admin_listen {
            None => AdminSetting::FromConfig,
            Some(AdminListen::Off) => AdminSetting::Off,
            Some(AdminListen::At(addr)) => AdminSetting::At(addr),
        },
    };
    let loaded = match Daemon::load(settings) {
        Ok(loaded) => loaded,
        Err(DaemonError::Refused(problems)) => {
            for p in &problems {
                eprintln!("{p}");
            }
            return Err(DaemonError::Refused(problems).into());
        }
        Err(e) => return Err(e.into()),
    };
    print_loaded(&loaded);
    let bound = loaded.bind()?;
    for dns in &bound.dns {
        println!("listening on {} (udp x{}, tcp)", dns.addr, dns.workers);
    }
    for (transport, addr) in &bound.encrypted {
        let name = match transport {
            Transport::Tls => "dot",
            Transport::Https => "doh",
            _ => "doq",
        };
        println!("{name} on {addr}");
    }
    let fleet_lines = fleet_lines(&loaded);
    let daemon = Daemon::start(loaded, bound)?;
    print_xdp();
    match daemon.admin {
        Some(admin) => println!("admin on http://{admin}"),
        None => println!("admin endpoint off (--admin-listen off)"),
    }
    if let Some(at) = daemon.drills {
        println!("drill schedule running ({} via {})", at.dns, at.admin);
    }
    for line in fleet_lines {
        println!("{line}");
    }
    let signals = install_signals(daemon.supervisor().handle())?;
    if daemon.reloader().status().startup.is_loading() {
        println!("first answers from the zone cache; loading the zones");
        // "ready" means fully loaded: every query answered as it will be.
        daemon.reloader().wait_until_loaded();
    }
    println!("ready");
    notify_systemd_ready();
    let reloader = daemon.reloader().clone();
    let token = daemon.admin_token().cloned();
    daemon
        .supervisor()
        .block_on(wait_for_signals(reloader, token, signals))?;
    daemon.stop();
    Ok(ExitCode::SUCCESS)
}

/// The first load: its warnings (logged), each zone's serial and the control serial.
fn print_loaded(loaded: &Loaded) {
    for w in &loaded.warnings {
        tracing::warn!("{w}");
    }
    for zone in loaded.reloader.snapshot().load().zones().zones() {
        println!("zone {} serial {}", zone.origin, zone.serial);
    }
    println!("control serial {}", loaded.reloader.status().serial);
}

/// What a fleet node says about the parts it runs.
fn fleet_lines(loaded: &Loaded) -> Vec<String> {
    let Some(node) = &loaded.fleet else {
        return Vec::new();
    };
    let (fleet, name) = (&node.config, &node.name);
    let mut lines = vec![format!(
        "fleet node {name}: control state from etcd {} under {}",
        fleet.etcd.join(","),
        fleet.prefix
    )];
    if let Some(plan) = &fleet.rollout {
        lines.push(format!(
            "fleet node {name}: staged rollouts ({} wave(s) listed, bake {} s)",
            plan.waves.len(),
            plan.bake_secs
        ));
    }
    if fleet.health.probers > 0 {
        lines.push(format!(
            "fleet node {name}: health probes shared, {} prober(s) per target{}",
            fleet.health.probers,
            fleet
                .site
                .as_deref()
                .map_or(String::new(), |site| format!(", site {site}"))
        ));
    }
    lines
}

/// The AF_XDP path's state, when `[server.xdp]` asked for it.
fn print_xdp() {
    if let Some(view) = steerdns::metrics::xdp::view() {
        match (&view.attach, &view.error) {
            (Some(attach), _) => println!(
                "xdp on {} ({attach}, {}; {} queue(s))",
                view.interface,
                view.copy_mode.as_deref().unwrap_or("?"),
                view.queues.len()
            ),
            (None, Some(error)) => println!("xdp not serving: {error}"),
            (None, None) => {}
        }
    }
}

/// Serves until SIGINT/SIGTERM; SIGHUP reloads everything through the reloader (a reload with
/// any problem is refused and the previous snapshot keeps serving) and re-reads the admin token.
async fn wait_for_signals(
    reloader: Arc<Reloader>,
    token: Option<Arc<AdminToken>>,
    signals: Signals,
) -> Result<()> {
    let Signals {
        mut hangup,
        mut terminate,
        mut interrupt,
    } = signals;
    loop {
        tokio::select! {
            _ = interrupt.recv() => return Ok(()),
            _ = terminate.recv() => return Ok(()),
            _ = hangup.recv() => {
                let reloader = reloader.clone();
                let token = token.clone();
                let _ = tokio::task::spawn_blocking(move || {
                    let _ = reloader.reload(Trigger::Signal);
                    if let Some(token) = token {
                        token.reread();
                    }
                })
                .await;
            }
        }
    }
}

/// Tells systemd (`Type=notify`) that the first snapshot is served: `READY=1` on the datagram
/// socket named by `$NOTIFY_SOCKET` (a path, or `@name` in the abstract namespace). No socket,
/// no message; a failure is logged, never fatal.
fn notify_systemd_ready() {
    let Some(target) = std::env::var_os("NOTIFY_SOCKET") else {
        return;
    };
    let sent = (|| -> std::io::Result<()> {
        use std::os::unix::net::{SocketAddr as UnixAddr, UnixDatagram};
        let socket = UnixDatagram::unbound()?;
        let bytes = std::os::unix::ffi::OsStrExt::as_bytes(target.as_os_str());
        let addr = match bytes.strip_prefix(b"@") {
            Some(name) => {
                <UnixAddr as std::os::linux::net::SocketAddrExt>::from_abstract_name(name)?
            }
            None => UnixAddr::from_pathname(std::path::Path::new(&target))?,
        };
        socket.send_to_addr(b"READY=1\nSTATUS=serving\n", &addr)?;
        Ok(())
    })();
    if let Err(e) = sent {
        tracing::warn!("sd_notify to {}: {e}", target.to_string_lossy());
    }
}

/// Signal handlers, installed before the server says it is ready: a SIGHUP that arrives
/// right after "ready" must reload, not kill (the default action).
struct Signals {
    hangup: tokio::signal::unix::Signal,
    terminate: tokio::signal::unix::Signal,
    interrupt: tokio::signal::unix::Signal,
}

fn install_signals(runtime: &tokio::runtime::Handle) -> Result<Signals> {
    use tokio::signal::unix::{signal, SignalKind};
    let _guard = runtime.enter();
    Ok(Signals {
        hangup: signal(SignalKind::hangup()).context("installing SIGHUP handler")?,
        terminate: signal(SignalKind::terminate()).context("installing SIGTERM handler")?,
        interrupt: signal(SignalKind::interrupt()).context("installing SIGINT handler")?,
    })
}
