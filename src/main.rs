//! The `steerdns` binary: command-line parsing and the process around the library.

mod cli;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};

use steerdns::config::Config;
use steerdns::reload::Source;
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
        Command::Serve(args) => cli::serve::serve(args),
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
