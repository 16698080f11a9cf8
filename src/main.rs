//! The `steerdns` binary: command-line parsing and the process around the library.

mod cli;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};

use steerdns::admin::{AdminState, AdminToken, AllowedHosts};
use steerdns::config::Config;
use steerdns::reload::{watch, Reloader, Source, Trigger};
use steerdns::server::{bind, UdpWorkers};
use steerdns::snapshot::load::load;

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
    /// Profile weights: set them (break-glass) or show what is served.
    #[command(subcommand)]
    Weight(WeightCommand),
    /// Send a region's clients elsewhere (its first usable neighbour or a fallback site).
    Drain {
        #[command(flatten)]
        target: cli::Target,
        /// Region name, e.g. eu-west.
        region: String,
        /// Fleet with staged rollouts: skip the bake times (never the taster or the gates).
        #[arg(long)]
        emergency: bool,
        #[command(flatten)]
        overrides: cli::safety::OverrideArgs,
        #[command(flatten)]
        direct: cli::direct::DirectArgs,
    },
    /// Undo `drain`: the region's clients get their normal answers again.
    Undrain {
        #[command(flatten)]
        target: cli::Target,
        /// Region name, e.g. eu-west.
        region: String,
        /// Fleet with staged rollouts: skip the bake times (never the taster or the gates).
        #[arg(long)]
        emergency: bool,
        #[command(flatten)]
        overrides: cli::safety::OverrideArgs,
        #[command(flatten)]
        direct: cli::direct::DirectArgs,
    },
    /// Fleet mode (`[fleet]`): every node's state, seeding, forgetting retired nodes.
    #[command(subcommand)]
    Fleet(FleetCommand),
    /// Staged rollouts of a fleet (`[fleet.rollout]`): where the newest change is, why it
    /// halted; resume or abort it.
    #[command(subcommand)]
    Rollout(RolloutCommand),
    /// Accepted control versions: list, roll back, compare.
    #[command(subcommand)]
    Control(ControlCommand),
    /// Safety rules (`[[safety.rules]]`): check a candidate control file against them.
    #[command(subcommand)]
    Safety(SafetyCommand),
    /// Gates in the control file (`[gates]`) that gating safety rules look at.
    #[command(subcommand)]
    Gate(GateCommand),
    /// Practice drills (`[[drills]]`): list them, run one now.
    #[command(subcommand)]
    Drill(DrillCommand),
    /// What the running server serves: serial, last refused change, weights, overrides.
    Status {
        #[command(flatten)]
        target: cli::Target,
        /// Print the raw JSON of /v1/status.
        #[arg(long)]
        json: bool,
    },
    /// Load feeds for the traffic shield.
    #[command(subcommand)]
    Load(LoadCommand),
    /// Ask the running server to re-read config, zones, geo database and control file.
    Reload {
        #[command(flatten)]
        target: cli::Target,
    },
    /// DNSSEC: make keys, print DS records for the parent or a validator, show key states,
    /// dump a signed zone.
    #[command(subcommand)]
    Dnssec(DnssecCommand),
    /// Simulate the traffic shield on a scenario (same step and policy code as the server);
    /// writes timeline.csv and plot.svg into DIR and prints a summary.
    Simulate(SimulateArgs),
    /// Internal: the taster child the server runs before it loads a change (see `[taster]`).
    #[command(hide = true)]
    Taste(TasteArgs),
}

#[derive(clap::Args)]
struct TasteArgs {
    #[command(flatten)]
    source: SourceArgs,
    #[arg(long)]
    nsid: Option<String>,
    #[arg(long)]
    identity: Option<String>,
    /// The candidate control text comes on standard input.
    #[arg(long)]
    control_stdin: bool,
    /// Load everything but the zones (the server shares the zones it serves).
    #[arg(long)]
    steering_only: bool,
    /// Relative paths in the config resolve against DIR (a staged bundle's copy).
    #[arg(long, value_name = "DIR")]
    base_dir: Option<PathBuf>,
    /// `[geo] database` override (a staged bundle's copy).
    #[arg(long, value_name = "FILE")]
    geo_database: Option<PathBuf>,
}

#[derive(clap::Args)]
struct SimulateArgs {
    /// Scenario file (TOML), e.g. tests/scenarios/surge-eu-west.toml.
    scenario: PathBuf,
    /// Output directory (created if missing).
    #[arg(long, value_name = "DIR")]
    out: PathBuf,
    /// Config file whose [topology], [[steered]] and [shield] to use (default ./steerdns.toml).
    #[arg(long, short)]
    config: Option<PathBuf>,
    /// `off` runs the baseline: the same scenario with the shield off.
    #[arg(long, default_value = "on", value_parser = ["on", "off"])]
    shield: String,
    /// Model N nameservers that resolvers spread their queries over: runs the scenario with
    /// one fleet shield leader deciding for all (the outputs) and with each nameserver
    /// deciding alone, and reports the client subnets answered differently by different
    /// nameservers in each case.
    #[arg(long, value_name = "N", default_value_t = 1,
          value_parser = clap::value_parser!(u16).range(1..=64))]
    nameservers: u16,
}

#[derive(Subcommand)]
enum DnssecCommand {
    /// Make a key for ZONE in the key directory ([dnssec] keys), mode 0600: a combined
    /// signing key (CSK) by default, or a KSK and a ZSK with --split. Published and active at
    /// once; the server uses it on its next reload.
    Keygen {
        #[command(flatten)]
        source: SourceArgs,
        /// The zone, e.g. example.com.
        zone: String,
        /// Make a KSK and a ZSK instead of one CSK.
        #[arg(long)]
        split: bool,
        /// 13 (ECDSA P-256, default from [dnssec] algorithm) or 15 (Ed25519).
        #[arg(long)]
        algorithm: Option<u8>,
    },
    /// Replace the rollover seed of ZONE's key directory with a fresh random one (0600):
    /// successors made from now on derive from it. Ship the new file to every node before
    /// the next rollover starts (`dnssec status` shows when).
    RotateSeed {
        #[command(flatten)]
        source: SourceArgs,
        /// The zone whose key directory's seed is replaced, e.g. example.com.
        zone: String,
    },
    /// Print ZONE's DS records in zone-file form (for the parent, or as a validator's trust
    /// anchor).
    Ds {
        #[command(flatten)]
        source: SourceArgs,
        /// The zone, e.g. example.com.
        zone: String,
    },
    /// Every signed zone's keys, their states and next events.
    Status {
        #[command(flatten)]
        source: SourceArgs,
    },
    /// Print the signed ZONE in zone-file form as it is served (for `ldns-verify-zone`).
    Dump {
        #[command(flatten)]
        source: SourceArgs,
        /// The zone, e.g. example.com.
        zone: String,
    },
}

#[derive(Subcommand)]
enum LoadCommand {
    /// Send a load feed (JSON: {"time": ..., "regions": {...}, "fallback": {...}}) to the
    /// running server; it is validated whole and refused with the reason if anything is wrong.
    Push {
        #[command(flatten)]
        target: cli::Target,
        /// The feed file, or `-` for standard input.
        file: String,
    },
}

#[derive(Subcommand)]
enum WeightCommand {
    /// Set endpoint weights of a profile in the control file, all at once (atomically):
    /// `steerdns weight set critical frontdoor=0 alt-cdn=100`. The result is validated before
    /// anything is written; then the command waits for the server to serve it.
    Set {
        #[command(flatten)]
        target: cli::Target,
        /// Profile name.
        profile: String,
        /// ENDPOINT=WEIGHT pairs (0..=1000).
        #[arg(required = true, value_name = "ENDPOINT=WEIGHT")]
        assignments: Vec<String>,
        /// Fleet with staged rollouts: skip the bake times (never the taster or the gates).
        #[arg(long)]
        emergency: bool,
        #[command(flatten)]
        overrides: cli::safety::OverrideArgs,
        #[command(flatten)]
        direct: cli::direct::DirectArgs,
    },
    /// Show the weights being served (from the running server, else from the files).
    Show {
        #[command(flatten)]
        target: cli::Target,
        /// Only this profile.
        profile: Option<String>,
    },
}

#[derive(Subcommand)]
enum FleetCommand {
    /// Every live node (what it serves, whether it is on the current revision), the missing
    /// ones and the last change's convergence time, read from etcd.
    Status {
        #[command(flatten)]
        target: cli::Target,
        /// Print JSON.
        #[arg(long)]
        json: bool,
        /// Ask every node's admin endpoint instead of etcd (done by itself when etcd is out
        /// of reach).
        #[command(flatten)]
        direct: cli::direct::DirectArgs,
    },
    /// Seed an empty fleet's control state from FILE (tasted first; refused if the fleet
    /// already has one). The first node started against an empty prefix does this by itself.
    Init {
        #[command(flatten)]
        target: cli::Target,
        /// The control file to seed from.
        #[arg(long, value_name = "FILE")]
        from: PathBuf,
    },
    /// Stop reporting a retired node as missing.
    Forget {
        #[command(flatten)]
        target: cli::Target,
        /// Node name.
        name: String,
    },
}

#[derive(Subcommand)]
enum RolloutCommand {
    /// The change being rolled out (or the last one), its phase, each wave and node (waiting,
    /// tasting, serving, refused, crashed, rolled back), why it halted; read from etcd.
    Status {
        #[command(flatten)]
        target: cli::Target,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Continue a halted rollout from the wave it halted in (its nodes are judged afresh).
    Resume {
        #[command(flatten)]
        target: cli::Target,
        /// The rollout of the nodes' config/zone/GeoIP bundles, not of the control state.
        #[arg(long)]
        bundles: bool,
    },
    /// Stop the rollout: every node serves the last known good, and the fleet's control state
    /// is set back to it (as a new version), so the next edit starts from what is served.
    /// With --bundles: every node serves its last known good bundle (the files are left as
    /// they are; new files begin the next bundle rollout).
    Abort {
        #[command(flatten)]
        target: cli::Target,
        /// The rollout of the nodes' config/zone/GeoIP bundles, not of the control state.
        #[arg(long)]
        bundles: bool,
    },
    /// Replace a missing or unreadable rollout state (every node holds meanwhile) with one
    /// settled on the last version every node serves by its own report — never the newest;
    /// the coordinator then rolls the newest out again, wave by wave.
    Reset {
        #[command(flatten)]
        target: cli::Target,
    },
}

#[derive(Subcommand)]
enum SafetyCommand {
    /// Evaluate a candidate control file: the safety rules (against the control state now and
    /// its history) and the loader; exit 1 naming each broken rule or problem.
    Check {
        #[command(flatten)]
        target: cli::Target,
        /// The candidate control file.
        file: PathBuf,
        #[command(flatten)]
        overrides: cli::safety::OverrideArgs,
    },
}

#[derive(Subcommand)]
enum DrillCommand {
    /// The configured drills, one per line, name first.
    List {
        #[command(flatten)]
        target: cli::Target,
    },
    /// Run a drill now against the running server: checks before, the change, checks while
    /// it is held, the revert; prints the measured times (ms) and records the run.
    Run {
        #[command(flatten)]
        target: cli::Target,
        name: String,
        /// The server's DNS address (default: the config's first listen address).
        #[arg(long, value_name = "ADDR")]
        dns: Option<std::net::SocketAddr>,
    },
}

#[derive(Subcommand)]
enum GateCommand {
    /// Set a gate, e.g. `steerdns gate set break-glass armed` (a change like any other).
    Set {
        #[command(flatten)]
        target: cli::Target,
        name: String,
        value: String,
        /// Fleet with staged rollouts: skip the bake times (never the taster or the gates).
        #[arg(long)]
        emergency: bool,
        #[command(flatten)]
        overrides: cli::safety::OverrideArgs,
        #[command(flatten)]
        direct: cli::direct::DirectArgs,
    },
    /// Remove a gate (`steerdns gate clear break-glass`).
    Clear {
        #[command(flatten)]
        target: cli::Target,
        name: String,
        /// Fleet with staged rollouts: skip the bake times (never the taster or the gates).
        #[arg(long)]
        emergency: bool,
        #[command(flatten)]
        overrides: cli::safety::OverrideArgs,
        #[command(flatten)]
        direct: cli::direct::DirectArgs,
    },
}

#[derive(Subcommand)]
enum OverrideCommand {
    /// Every node forgets its local override and serves the fleet's version again (etcd's
    /// newest, else the one the override replaced): the way out of an override in conflict
    /// with a newer version written to etcd meanwhile.
    Drop {
        #[command(flatten)]
        target: cli::Target,
    },
}

#[derive(Subcommand)]
enum ControlCommand {
    /// List accepted control versions (serial, time, source, what changed).
    History {
        #[command(flatten)]
        target: cli::Target,
    },
    /// Restore an accepted version (default: the one before the newest); validated first.
    Rollback {
        #[command(flatten)]
        target: cli::Target,
        /// Serial to restore.
        version: Option<u64>,
        /// Fleet with staged rollouts: skip the bake times (never the taster or the gates).
        #[arg(long)]
        emergency: bool,
        #[command(flatten)]
        overrides: cli::safety::OverrideArgs,
        #[command(flatten)]
        direct: cli::direct::DirectArgs,
    },
    /// A fleet node's local override (sent with `--direct` while etcd was down).
    #[command(subcommand)]
    Override(OverrideCommand),
    /// Show what differs between two accepted versions.
    Diff {
        #[command(flatten)]
        target: cli::Target,
        /// Older serial (see `steerdns control history`).
        a: u64,
        /// Newer serial.
        b: u64,
    },
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
    /// Config file (TOML). Default: ./steerdns.toml if it exists, else built-in defaults; with
    /// --zones and no --config, always built-in defaults (./steerdns.toml is not read).
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
    /// Address of the admin HTTP endpoint (status, metrics, reload, load feeds); overrides
    /// [admin] listen. `off` runs without one (no status, metrics, reload or pushed feeds;
    /// SIGHUP still reloads).
    #[arg(long, value_name = "ADDR|off", value_parser = parse_admin_listen)]
    admin_listen: Option<AdminListen>,
    /// This node's NSID (`dig +nsid`); overrides [server] nsid, also across reloads. For
    /// fleets sharing one config file, e.g. `--nsid "$NODE_NAME"` in Kubernetes.
    #[arg(long, value_name = "TEXT")]
    nsid: Option<String>,
    /// This node's answer to `CH TXT id.server` / `hostname.bind`; overrides [server] identity,
    /// also across reloads.
    #[arg(long, value_name = "TEXT")]
    identity: Option<String>,
    /// This node's name in the fleet (`[fleet] node`): its registry key in etcd and its line in
    /// `steerdns fleet status`. Like `--nsid`, for fleets that share one config file.
    #[arg(long, value_name = "NAME")]
    node: Option<String>,
    /// Log format on stderr: `text` for people, `json` (one object per line) for log shippers.
    /// The level comes from STEERDNS_LOG (default `info`); queries are logged only when
    /// `[server] query_log_sample` is set.
    #[arg(long, value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
}

/// `--admin-listen`: an address, or `off`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum AdminListen {
    Off,
    At(SocketAddr),
}

fn parse_admin_listen(text: &str) -> Result<AdminListen, String> {
    if text.eq_ignore_ascii_case("off") {
        return Ok(AdminListen::Off);
    }
    text.parse()
        .map(AdminListen::At)
        .map_err(|e| format!("{e}: expected an address such as 127.0.0.1:5380, or `off`"))
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
enum LogFormat {
    #[default]
    Text,
    Json,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging(match &cli.command {
        Some(Command::Serve(args)) => args.log_format,
        _ => LogFormat::Text,
    });
    let result = match cli.command.unwrap_or(Command::Serve(ServeArgs::default())) {
        Command::Serve(args) => serve(args),
        Command::Check(args) => check(args),
        Command::Geoip(command) => geoip(command),
        Command::Weight(WeightCommand::Set {
            target,
            profile,
            assignments,
            emergency,
            overrides,
            direct,
        }) => {
            if direct.direct {
                cli::direct::weight_set(&target, &profile, &assignments, &overrides)
            } else {
                cli::weight_set(&target, &profile, &assignments, emergency, &overrides)
            }
        }
        Command::Weight(WeightCommand::Show { target, profile }) => {
            cli::weight_show(&target, profile.as_deref())
        }
        Command::Drain {
            target,
            region,
            emergency,
            overrides,
            direct,
        } => match direct.direct {
            true => cli::direct::drain(&target, &region, true, &overrides),
            false => cli::drain(&target, &region, true, emergency, &overrides),
        },
        Command::Undrain {
            target,
            region,
            emergency,
            overrides,
            direct,
        } => match direct.direct {
            true => cli::direct::drain(&target, &region, false, &overrides),
            false => cli::drain(&target, &region, false, emergency, &overrides),
        },
        Command::Control(ControlCommand::History { target }) => cli::history_list(&target),
        Command::Control(ControlCommand::Rollback {
            target,
            version,
            emergency,
            overrides,
            direct,
        }) => match direct.direct {
            true => cli::direct::rollback(&target, version, &overrides),
            false => cli::rollback(&target, version, emergency, &overrides),
        },
        Command::Control(ControlCommand::Override(OverrideCommand::Drop { target })) => {
            cli::direct::drop_override(&target)
        }
        Command::Control(ControlCommand::Diff { target, a, b }) => cli::diff(&target, a, b),
        Command::Safety(SafetyCommand::Check {
            target,
            file,
            overrides,
        }) => cli::safety::check(&target, &file, &overrides),
        Command::Drill(DrillCommand::List { target }) => cli::drill::list(&target),
        Command::Drill(DrillCommand::Run { target, name, dns }) => {
            cli::drill::run_now(&target, &name, dns)
        }
        Command::Gate(GateCommand::Set {
            target,
            name,
            value,
            emergency,
            overrides,
            direct,
        }) => match direct.direct {
            true => cli::direct::gate(&target, &name, Some(&value), &overrides),
            false => cli::safety::gate(&target, &name, Some(&value), emergency, &overrides),
        },
        Command::Gate(GateCommand::Clear {
            target,
            name,
            emergency,
            overrides,
            direct,
        }) => match direct.direct {
            true => cli::direct::gate(&target, &name, None, &overrides),
            false => cli::safety::gate(&target, &name, None, emergency, &overrides),
        },
        Command::Status { target, json } => cli::status(&target, json),
        Command::Fleet(FleetCommand::Status {
            target,
            json,
            direct,
        }) => cli::direct::fleet_status(&target, json, direct.direct),
        Command::Fleet(FleetCommand::Init { target, from }) => {
            target.config().and_then(|c| cli::fleet::init(&c, &from))
        }
        Command::Fleet(FleetCommand::Forget { target, name }) => {
            target.config().and_then(|c| cli::fleet::forget(&c, &name))
        }
        Command::Rollout(RolloutCommand::Status { target, json }) => {
            target.config().and_then(|c| cli::rollout::status(&c, json))
        }
        Command::Rollout(RolloutCommand::Resume { target, bundles }) => target
            .config()
            .and_then(|c| cli::rollout::resume(&c, bundles)),
        Command::Rollout(RolloutCommand::Abort { target, bundles }) => target
            .config()
            .and_then(|c| cli::rollout::abort(&c, bundles)),
        Command::Rollout(RolloutCommand::Reset { target }) => {
            target.config().and_then(|c| cli::rollout::reset(&c))
        }
        Command::Reload { target } => cli::reload(&target),
        Command::Load(LoadCommand::Push { target, file }) => cli::load_push(&target, &file),
        Command::Simulate(args) => simulate(args),
        Command::Dnssec(command) => dnssec(command),
        Command::Taste(args) => taste(args),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("steerdns: {}", cli::report(&e));
            ExitCode::FAILURE
        }
    }
}

fn init_logging(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("STEERDNS_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder.init(),
        // Fields at the top level (not under "fields"), so shippers index them directly.
        LogFormat::Json => builder.json().flatten_event(true).init(),
    }
}

fn read_config(args: &SourceArgs) -> Result<Config> {
    let source = Source {
        config: args.config.clone(),
        zones: args.zones.clone(),
        ..Source::default()
    };
    source.read_config().map_err(anyhow::Error::msg)
}

/// The taster child: loads the change the server is about to load and prints its verdict
/// (one JSON line). Run by the server only.
fn taste(args: TasteArgs) -> Result<ExitCode> {
    use std::io::Read;
    let source = Source {
        config: args.source.config,
        zones: args.source.zones,
        nsid: args.nsid,
        identity: args.identity,
        base_dir: args.base_dir,
        geo_database: args.geo_database,
        ..Source::default()
    };
    let control = if args.control_stdin {
        let mut text = String::new();
        std::io::stdin()
            .take(steerdns::files::SMALL_FILE_LIMIT)
            .read_to_string(&mut text)
            .context("reading the control text from standard input")?;
        Some(text)
    } else {
        None
    };
    let verdict = steerdns::taster::child::taste(
        source.read_config(),
        control.as_deref(),
        args.steering_only,
    );
    println!("{}", serde_json::to_string(&verdict)?);
    Ok(ExitCode::from(verdict.exit_code()))
}

fn geoip(command: GeoipCommand) -> Result<ExitCode> {
    match command {
        #[cfg(not(feature = "tools"))]
        GeoipCommand::Build { .. } => anyhow::bail!(
            "this steerdns was built without the `tools` feature (cargo build --features \
             tools): `geoip build` needs it"
        ),
        #[cfg(feature = "tools")]
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
            let policies = config
                .compile_policies(&Default::default())
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

fn dnssec(command: DnssecCommand) -> Result<ExitCode> {
    match command {
        DnssecCommand::Keygen {
            source,
            zone,
            split,
            algorithm,
        } => cli::dnssec::keygen(&read_config(&source)?, &zone, split, algorithm),
        DnssecCommand::RotateSeed { source, zone } => {
            cli::dnssec::rotate_seed(&read_config(&source)?, &zone)
        }
        DnssecCommand::Ds { source, zone } => cli::dnssec::ds(&read_config(&source)?, &zone),
        DnssecCommand::Status { source } => cli::dnssec::status(&read_config(&source)?),
        DnssecCommand::Dump { source, zone } => cli::dnssec::dump(&read_config(&source)?, &zone),
    }
}

fn simulate(args: SimulateArgs) -> Result<ExitCode> {
    use steerdns::shield::sim;
    let config = read_config(&SourceArgs {
        config: args.config,
        zones: None,
    })?;
    let (policies, settings) = sim::compile_topology(&config)?;
    let scenario = sim::Scenario::load(&args.scenario)?;
    let shield_on = args.shield == "on";
    let count = usize::from(args.nameservers);
    let with_leader = sim::Nameservers {
        count,
        leader: true,
    };
    let (result, consistency) =
        sim::run_nameservers(&scenario, &policies, &settings, shield_on, with_leader)?;
    sim::write_outputs(&result, &args.out)?;
    print!("{}", sim::summary_text(&result));
    if count > 1 {
        let alone = sim::Nameservers {
            count,
            leader: false,
        };
        let (_, apart) = sim::run_nameservers(&scenario, &policies, &settings, shield_on, alone)?;
        print!("{}", sim::consistency_text(&consistency));
        print!("{}", sim::consistency_text(&apart));
    }
    println!(
        "wrote {} and {}",
        args.out.join("timeline.csv").display(),
        args.out.join("plot.svg").display()
    );
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
                loaded.compiled.zones().zones().len(),
                loaded.compiled.precompiled().len()
            );
            // The process ends here: freeing a million names piece by piece would only delay
            // the exit (the kernel takes the memory back at once).
            std::mem::forget(loaded);
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

fn install_signals(runtime: &tokio::runtime::Runtime) -> Result<Signals> {
    use tokio::signal::unix::{signal, SignalKind};
    let _guard = runtime.enter();
    Ok(Signals {
        hangup: signal(SignalKind::hangup()).context("installing SIGHUP handler")?,
        terminate: signal(SignalKind::terminate()).context("installing SIGTERM handler")?,
        interrupt: signal(SignalKind::interrupt()).context("installing SIGINT handler")?,
    })
}

/// The `[[drills]]` schedule, asking this server over its first listen address (an
/// unspecified one through loopback) and its admin endpoint.
fn start_drill_schedule(
    reloader: &Arc<steerdns::reload::Reloader>,
    admin: Option<std::net::SocketAddr>,
    listening: &[std::net::SocketAddr],
) {
    let loopback = |mut addr: std::net::SocketAddr| {
        if addr.ip().is_unspecified() {
            addr.set_ip(match addr {
                std::net::SocketAddr::V4(_) => std::net::Ipv4Addr::LOCALHOST.into(),
                std::net::SocketAddr::V6(_) => std::net::Ipv6Addr::LOCALHOST.into(),
            });
        }
        addr
    };
    let (Some(admin), Some(dns)) = (admin, listening.first()) else {
        return;
    };
    let at = steerdns::drill::Endpoints {
        admin: loopback(admin),
        dns: loopback(*dns),
    };
    let reloader = reloader.clone();
    if steerdns::drill::schedule::start(move || reloader.source().read_config().ok(), at).is_some()
    {
        println!("drill schedule running ({} via {})", at.dns, at.admin);
    }
}

fn serve(args: ServeArgs) -> Result<ExitCode> {
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
    let mut config = source.read_config().map_err(anyhow::Error::msg)?;
    steerdns::safety::tally::configure(&config.safety);
    steerdns::drill::log::configure(&config);
    if !args.listen.is_empty() {
        config.server.listen = args.listen.clone();
    }
    if let Some(AdminListen::At(admin)) = args.admin_listen {
        config.admin.listen = admin;
    }
    // Fleet mode: the control text comes from etcd (the control file is this node's cache).
    let fleet = config.fleet.clone().map(|fleet| {
        let name = steerdns::fleet::node_name(&config);
        let origin = steerdns::fleet::origin::FleetOrigin::new(&name, &fleet.prefix, &fleet.etcd);
        if let Some(paths) = steerdns::fleet::direct::paths(&config) {
            origin.restore_direct(paths);
        }
        (fleet, name, origin)
    });
    let origin: Arc<dyn steerdns::reload::ControlOrigin> = match &fleet {
        Some((_, _, origin)) => Arc::new(steerdns::fleet::origin::Origin(origin.clone())),
        None => Arc::new(steerdns::reload::FileOrigin),
    };
    let (reloader, warnings) = match Reloader::start_with(source, origin) {
        Ok(started) => started,
        Err(problems) => {
            for p in &problems {
                eprintln!("{p}");
            }
            anyhow::bail!(
                "refusing to start: {} problem(s) in config, zones or control file",
                problems.len()
            );
        }
    };
    for w in &warnings {
        tracing::warn!("{w}");
    }
    let status = reloader.status();
    if let Some(refusal) = &status.last_refusal {
        for reason in &refusal.reasons {
            tracing::error!("control file refused at startup: {reason}");
        }
    }
    let snapshot = reloader.snapshot().clone();
    for zone in snapshot.load().zones().zones() {
        println!("zone {} serial {}", zone.origin, zone.serial);
    }
    println!("control serial {}", status.serial);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let signals = install_signals(&runtime)?;
    let workers = config.udp_workers();
    let mut udp = Vec::new();
    let mut ports = Vec::new();
    let mut listening = Vec::new();
    for addr in &config.server.listen {
        let bound = bind(*addr, workers)?;
        println!("listening on {} (udp x{workers}, tcp)", bound.addr);
        ports.push(bound.addr.port());
        listening.push(bound.addr);
        udp.push(UdpWorkers::start(bound.udp, &snapshot)?);
        let tcp = {
            let _guard = runtime.enter();
            tokio::net::TcpListener::from_std(bound.tcp)?
        };
        runtime.spawn(steerdns::server::tcp::serve(
            tcp,
            snapshot.clone(),
            steerdns::server::tcp::TcpLimits::from_config(&config.server.tcp),
        ));
    }
    start_encrypted(&config, &runtime, &snapshot)?;
    let xdp = start_xdp(&config, ports, &snapshot);
    let mut token = None;
    let mut admin_addr = None;
    if args.admin_listen == Some(AdminListen::Off) {
        println!("admin endpoint off (--admin-listen off)");
    } else {
        let admin = runtime
            .block_on(tokio::net::TcpListener::bind(config.admin.listen))
            .with_context(|| format!("admin endpoint on {}", config.admin.listen))?;
        let local = admin.local_addr()?;
        println!("admin on http://{local}");
        admin_addr = Some(local);
        let admin_token = Arc::new(AdminToken::open(config.admin.token_file.clone()));
        token = Some(admin_token.clone());
        let admin_state = AdminState {
            reloader: reloader.clone(),
            token: admin_token,
            hosts: Arc::new(AllowedHosts::new(local, &config.admin.allowed_hosts)),
            fleet: fleet.as_ref().map(|(_, _, origin)| origin.clone()),
        };
        let limits = steerdns::admin::connections::ConnectionLimits::from_config(&config.admin);
        runtime.spawn(steerdns::admin::serve(admin, admin_state, limits));
    }
    init_descriptor_budget(&config.admin);
    start_drill_schedule(&reloader, admin_addr, &listening);
    if let Some((fleet, name, _)) = &fleet {
        if fleet.health.probers > 0 {
            reloader
                .health()
                .enable_sharing(name, fleet.site.as_deref(), fleet.health.probers);
        } else {
            reloader.health().set_node(name);
        }
    }
    reloader.health().start(runtime.handle());
    if let Some((_, name, _)) = &fleet {
        // Before the shield's first tick: in fleet mode it serves only what the leader
        // publishes through etcd.
        reloader.shield().fleet.enable(name);
    }
    steerdns::reload::shield::spawn(reloader.shield().clone(), snapshot.clone())
        .context("starting the traffic shield")?;
    steerdns::reload::resign::spawn(reloader.clone()).context("starting DNSSEC re-signing")?;
    if let Some((fleet, name, origin)) = fleet {
        println!(
            "fleet node {name}: control state from etcd {} under {}",
            fleet.etcd.join(","),
            fleet.prefix
        );
        let info = steerdns::fleet::node::NodeInfo {
            name,
            nsid: config.server.nsid.clone(),
            identity: config.server.identity.clone(),
            listen: listening,
            admin: admin_addr,
        };
        if let Some(plan) = fleet.rollout.clone() {
            println!(
                "fleet node {}: staged rollouts ({} wave(s) listed, bake {} s)",
                info.name,
                plan.waves.len(),
                plan.bake_secs
            );
            steerdns::fleet::coordinator::spawn(
                runtime.handle(),
                fleet.clone(),
                plan,
                info.name.clone(),
                origin.clone(),
            );
        }
        steerdns::fleet::shield::spawn(
            runtime.handle(),
            fleet.clone(),
            info.name.clone(),
            reloader.shield().clone(),
        );
        if fleet.health.probers > 0 {
            println!(
                "fleet node {}: health probes shared, {} prober(s) per target{}",
                info.name,
                fleet.health.probers,
                fleet
                    .site
                    .as_deref()
                    .map_or(String::new(), |site| format!(", site {site}"))
            );
            steerdns::fleet::health::spawn(
                runtime.handle(),
                fleet.clone(),
                reloader.health().clone(),
                info.name.clone(),
            );
        }
        steerdns::fleet::node::spawn(runtime.handle(), fleet, reloader.clone(), origin, info);
    } else if let Some(control) = &config.control.file {
        watch::spawn(reloader.clone(), control.clone())
            .context("starting the control file watcher")?;
    }
    println!("ready");
    notify_systemd_ready();
    runtime.block_on(wait_for_signals(reloader, token, signals))?;
    if let Some(xdp) = xdp {
        xdp.stop();
    }
    for workers in udp {
        workers.stop();
    }
    Ok(ExitCode::SUCCESS)
}

/// Binds and starts the encrypted transports of `[server.tls]` (each address is printed as
/// "dot on ADDR", "doh on ADDR", "doq on ADDR").
fn start_encrypted(
    config: &Config,
    runtime: &tokio::runtime::Runtime,
    snapshot: &steerdns::snapshot::SharedSnapshot,
) -> Result<()> {
    use steerdns::dns::wire::Transport;
    use steerdns::server::encrypted::{self, Limits};
    let Some(tls) = &config.server.tls else {
        return Ok(());
    };
    let limits = Limits::from_config(tls, &config.server.tcp);
    let _guard = runtime.enter();
    let report = |transport: Transport, name: &str, addr: SocketAddr| {
        println!("{name} on {addr}");
        steerdns::metrics::encrypted::add_listener(transport, addr);
    };
    for addr in &tls.dot {
        let listener = tokio::net::TcpListener::from_std(steerdns::server::bind_stream(*addr)?)?;
        report(Transport::Tls, "dot", listener.local_addr()?);
        let serving = encrypted::serve_dot(listener, snapshot.clone(), limits.clone());
        runtime.spawn(async move {
            if let Err(e) = serving.await {
                tracing::error!("dot stopped: {e}");
            }
        });
    }
    for addr in &tls.doh {
        let listener = tokio::net::TcpListener::from_std(steerdns::server::bind_stream(*addr)?)?;
        report(Transport::Https, "doh", listener.local_addr()?);
        let serving = encrypted::https::serve_doh(listener, snapshot.clone(), limits.clone());
        runtime.spawn(async move {
            if let Err(e) = serving.await {
                tracing::error!("doh stopped: {e}");
            }
        });
    }
    for addr in &tls.doq {
        let socket = steerdns::server::bind_datagram(*addr)?;
        let endpoint = encrypted::quic::endpoint(socket, snapshot, &limits)?;
        report(Transport::Quic, "doq", endpoint.local_addr()?);
        runtime.spawn(encrypted::quic::serve_doq(
            endpoint,
            snapshot.clone(),
            limits.clone(),
        ));
    }
    Ok(())
}

/// Starts the AF_XDP path if `[server.xdp]` asks for it; the sockets serve whatever it does
/// not take, and everything if it cannot attach (the reason is logged and in status).
fn start_xdp(
    config: &Config,
    mut listen_ports: Vec<u16>,
    snapshot: &steerdns::snapshot::SharedSnapshot,
) -> Option<steerdns::server::xdp::XdpPath> {
    let xdp = config.server.xdp.as_ref()?;
    listen_ports.sort_unstable();
    listen_ports.dedup();
    let ports = if xdp.ports.is_empty() {
        listen_ports
    } else {
        xdp.ports.clone()
    };
    let path = steerdns::server::xdp::XdpPath::start_or_report(xdp, ports, snapshot);
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
    path
}

/// The listeners' shared descriptor budget ([`steerdns::descriptors`]), once they are bound.
fn init_descriptor_budget(admin: &steerdns::config::admin::AdminConfig) {
    match steerdns::descriptors::init(admin.descriptor_reserve, admin.max_connections) {
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
