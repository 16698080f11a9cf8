//! The `steerdns` binary: command-line parsing and the process around the library.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{Context, Result};
use arc_swap::ArcSwap;
use clap::{Parser, Subcommand};

use steerdns::config::Config;
use steerdns::server::{bind, UdpWorkers};
use steerdns::snapshot::{load::load, SharedSnapshot};

/// Authoritative DNS that steers clients between global anycast, regional anycast and a
/// fallback ring, with weighted always-serve failover profiles.
#[derive(Parser)]
#[command(version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand)]
enum Command {
    /// Serve DNS (the default command): UDP and TCP on every listen address.
    Serve(ServeArgs),
    /// Load and validate config and zones without serving; exit 1 listing every problem.
    Check(SourceArgs),
    /// GeoIP databases: build one from CSV, or see where an address lands.
    #[command(subcommand)]
    Geoip(GeoipCommand),
}

#[derive(Subcommand)]
enum GeoipCommand {
    /// Build a MaxMind-format database from `network,country,continent` CSV rows.
    Build {
        /// CSV input: one `network,country,continent` row per line (`#` comments, header ok).
        csv: PathBuf,
        /// Output .mmdb file (written atomically).
        out: PathBuf,
    },
    /// Show the database network, country, continent and region an address maps to.
    Lookup {
        /// Config file whose [geo] and [topology] sections to use (default ./steerdns.toml).
        #[arg(long, short)]
        config: Option<PathBuf>,
        /// The address to look up (IPv4 or IPv6).
        ip: std::net::IpAddr,
    },
}

#[derive(clap::Args, Default)]
struct SourceArgs {
    /// Config file (TOML). Default: ./steerdns.toml if it exists, else built-in defaults.
    #[arg(long, short)]
    config: Option<PathBuf>,
    /// Directory of zone files (<origin>.zone); overrides the config file.
    #[arg(long)]
    zones: Option<PathBuf>,
}

#[derive(clap::Args, Default)]
struct ServeArgs {
    #[command(flatten)]
    source: SourceArgs,
    /// Address to listen on (UDP and TCP), repeatable; overrides the config file.
    #[arg(long, value_name = "ADDR")]
    listen: Vec<SocketAddr>,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging();
    let result = match cli.command.unwrap_or(Command::Serve(ServeArgs::default())) {
        Command::Serve(args) => serve(args),
        Command::Check(args) => check(args),
        Command::Geoip(command) => geoip(command),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("steerdns: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("STEERDNS_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
}

fn read_config(args: &SourceArgs) -> Result<Config> {
    let default_path = PathBuf::from("steerdns.toml");
    let mut config = match &args.config {
        Some(path) => Config::load(path)?,
        None if default_path.exists() => Config::load(&default_path)?,
        None => Config::default(),
    };
    if let Some(zones) = &args.zones {
        config.server.zones = zones.clone();
    }
    Ok(config)
}

fn geoip(command: GeoipCommand) -> Result<ExitCode> {
    match command {
        GeoipCommand::Build { csv, out } => {
            let report = steerdns::geo::build_mmdb_from_csv(&csv, &out)?;
            println!(
                "wrote {}: {} IPv4 and {} IPv6 networks, {} bytes",
                out.display(),
                report.ipv4_networks,
                report.ipv6_networks,
                report.bytes
            );
        }
        GeoipCommand::Lookup { config, ip } => {
            let config = read_config(&SourceArgs {
                config,
                zones: None,
            })?;
            let policies = steerdns::policy::compile(
                &config.topology,
                &config.profiles,
                &config.steered,
                &Default::default(),
            )
            .map_err(|errors| {
                let lines: Vec<String> = errors.iter().map(ToString::to_string).collect();
                anyhow::anyhow!("config: {}", lines.join("; "))
            })?;
            let regions: Vec<&str> = policies.region_names().collect();
            let locator = steerdns::geo::Locator::compile(&config.geo, &config.base_dir, &regions)?;
            if let Some(reason) = locator.degraded() {
                eprintln!("warning: geo database unusable: {reason}");
            }
            let ip = match ip {
                std::net::IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, std::net::IpAddr::V4),
                v4 => v4,
            };
            println!("{}", locator.describe(ip));
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn check(args: SourceArgs) -> Result<ExitCode> {
    let config = read_config(&args)?;
    match load(&config) {
        Ok(loaded) => {
            for w in &loaded.warnings {
                println!("{w}");
            }
            println!(
                "ok: {} zones, {} precompiled answers",
                loaded.snapshot.zones.zones().len(),
                loaded.snapshot.precompiled.len()
            );
            Ok(ExitCode::SUCCESS)
        }
        Err(problems) => {
            for p in &problems {
                println!("{p}");
            }
            Ok(ExitCode::FAILURE)
        }
    }
}

/// Serves until SIGINT/SIGTERM; SIGHUP reloads config and zones (kept only if all of it is good).
async fn wait_for_signals(source: &SourceArgs, snapshot: &SharedSnapshot) -> Result<()> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut hangup = signal(SignalKind::hangup()).context("installing SIGHUP handler")?;
    let mut terminate = signal(SignalKind::terminate()).context("installing SIGTERM handler")?;
    loop {
        tokio::select! {
            _ = tokio::signal::ctrl_c() => return Ok(()),
            _ = terminate.recv() => return Ok(()),
            _ = hangup.recv() => reload(source, snapshot),
        }
    }
}

fn reload(source: &SourceArgs, snapshot: &SharedSnapshot) {
    let loaded = read_config(source)
        .map_err(|e| vec![format!("{e:#}")])
        .and_then(|c| load(&c));
    match loaded {
        Ok(loaded) => {
            snapshot.store(Arc::new(loaded.snapshot));
            tracing::info!(
                "reloaded in {:.1} ms",
                loaded.elapsed.as_secs_f64() * 1000.0
            );
        }
        Err(problems) => {
            for p in &problems {
                tracing::error!("reload refused, still serving the previous snapshot: {p}");
            }
        }
    }
}

fn serve(args: ServeArgs) -> Result<ExitCode> {
    let mut config = read_config(&args.source)?;
    if !args.listen.is_empty() {
        config.server.listen = args.listen.clone();
    }
    let loaded = match load(&config) {
        Ok(loaded) => loaded,
        Err(problems) => {
            for p in &problems {
                eprintln!("{p}");
            }
            anyhow::bail!(
                "refusing to start: {} problem(s) in config or zones",
                problems.len()
            );
        }
    };
    for w in &loaded.warnings {
        tracing::warn!("{w}");
    }
    for zone in loaded.snapshot.zones.zones() {
        println!("zone {} serial {}", zone.origin, zone.serial);
    }
    let snapshot: SharedSnapshot = Arc::new(ArcSwap::from_pointee(loaded.snapshot));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let workers = config.udp_workers();
    let mut udp = Vec::new();
    for addr in &config.server.listen {
        let bound = bind(*addr, workers)?;
        println!("listening on {} (udp x{workers}, tcp)", bound.addr);
        udp.push(UdpWorkers::start(bound.udp, &snapshot)?);
        let tcp = {
            let _guard = runtime.enter();
            tokio::net::TcpListener::from_std(bound.tcp)?
        };
        runtime.spawn(steerdns::server::tcp::serve(
            tcp,
            snapshot.clone(),
            config.tcp_limits(),
        ));
    }
    println!("ready in {:.1} ms", loaded.elapsed.as_secs_f64() * 1000.0);
    runtime.block_on(wait_for_signals(&args.source, &snapshot))?;
    for workers in udp {
        workers.stop();
    }
    Ok(ExitCode::SUCCESS)
}
