//! The command line: the clap structures of every subcommand and their arguments.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Parser, Subcommand};

/// Authoritative DNS that steers clients between global anycast, regional anycast and a
/// fallback ring, with weighted always-serve failover profiles.
#[derive(Parser)]
#[command(version, about, long_about = None)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,
}

#[derive(Subcommand)]
pub enum Command {
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
        target: crate::cli::Target,
        /// Region name, e.g. eu-west.
        region: String,
        #[command(flatten)]
        write: crate::cli::WriteArgs,
    },
    /// Undo `drain`: the region's clients get their normal answers again.
    Undrain {
        #[command(flatten)]
        target: crate::cli::Target,
        /// Region name, e.g. eu-west.
        region: String,
        #[command(flatten)]
        write: crate::cli::WriteArgs,
    },
    /// Cells (`[topology.cells]`): drain one out of its tenants' answers, or undo that.
    #[command(subcommand)]
    Cell(CellCommand),
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
    /// Tenants (`tenants/<name>.toml`): what each serves, what was refused and why.
    #[command(subcommand)]
    Tenant(TenantCommand),
    /// What the running server serves: serial, last refused change, weights, overrides.
    Status {
        #[command(flatten)]
        target: crate::cli::Target,
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
        target: crate::cli::Target,
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
pub struct TasteArgs {
    #[command(flatten)]
    pub source: SourceArgs,
    #[arg(long)]
    pub nsid: Option<String>,
    #[arg(long)]
    pub identity: Option<String>,
    /// The candidate control text comes on standard input.
    #[arg(long)]
    pub control_stdin: bool,
    /// Load everything but the zones (the server shares the zones it serves).
    #[arg(long)]
    pub steering_only: bool,
    /// Standard input is the control text and the changed lines of zone files the server
    /// will apply as a difference (JSON): loads the steering and parses those lines.
    #[arg(long)]
    pub difference_stdin: bool,
    /// Standard input is a batch of tenant documents (JSON) to taste against the platform.
    #[arg(long)]
    pub tenants_stdin: bool,
    /// Relative paths in the config resolve against DIR (a staged bundle's copy).
    #[arg(long, value_name = "DIR")]
    pub base_dir: Option<PathBuf>,
    /// `[geo] database` override (a staged bundle's copy).
    #[arg(long, value_name = "FILE")]
    pub geo_database: Option<PathBuf>,
}

#[derive(clap::Args)]
pub struct SimulateArgs {
    /// Scenario file (TOML), e.g. tests/scenarios/surge-eu-west.toml.
    pub scenario: PathBuf,
    /// Output directory (created if missing).
    #[arg(long, value_name = "DIR")]
    pub out: PathBuf,
    /// Config file whose [topology], [[steered]] and [shield] to use (default ./steerdns.toml).
    #[arg(long, short)]
    pub config: Option<PathBuf>,
    /// `off` runs the baseline: the same scenario with the shield off.
    #[arg(long, default_value = "on", value_parser = ["on", "off"])]
    pub shield: String,
    /// Model N nameservers that resolvers spread their queries over: runs the scenario with
    /// one fleet shield leader deciding for all (the outputs) and with each nameserver
    /// deciding alone, and reports the client subnets answered differently by different
    /// nameservers in each case.
    #[arg(long, value_name = "N", default_value_t = 1,
          value_parser = clap::value_parser!(u16).range(1..=64))]
    pub nameservers: u16,
}

#[derive(Subcommand)]
pub enum DnssecCommand {
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
pub enum LoadCommand {
    /// Send a load feed (JSON: {"time": ..., "regions": {...}, "fallback": {...}}) to the
    /// running server; it is validated whole and refused with the reason if anything is wrong.
    Push {
        #[command(flatten)]
        target: crate::cli::Target,
        /// The feed file, or `-` for standard input.
        file: String,
    },
}

#[derive(Subcommand)]
pub enum WeightCommand {
    /// Set endpoint weights of a profile in the control file, all at once (atomically):
    /// `steerdns weight set critical frontdoor=0 alt-cdn=100`. The result is validated before
    /// anything is written; then the command waits for the server to serve it.
    Set {
        #[command(flatten)]
        target: crate::cli::Target,
        /// Profile name.
        profile: String,
        /// ENDPOINT=WEIGHT pairs (0..=1000).
        #[arg(required = true, value_name = "ENDPOINT=WEIGHT")]
        assignments: Vec<String>,
        #[command(flatten)]
        write: crate::cli::WriteArgs,
    },
    /// Show the weights being served (from the running server, else from the files).
    Show {
        #[command(flatten)]
        target: crate::cli::Target,
        /// Only this profile.
        profile: Option<String>,
    },
}

#[derive(Subcommand)]
pub enum FleetCommand {
    /// Every live node (what it serves, whether it is on the current revision), the missing
    /// ones and the last change's convergence time, read from etcd.
    Status {
        #[command(flatten)]
        target: crate::cli::Target,
        /// Print JSON.
        #[arg(long)]
        json: bool,
        /// Ask every node's admin endpoint instead of etcd (done by itself when etcd is out
        /// of reach).
        #[command(flatten)]
        direct: crate::cli::direct::DirectArgs,
    },
    /// Seed an empty fleet's control state from FILE (tasted first; refused if the fleet
    /// already has one). The first node started against an empty prefix does this by itself.
    Init {
        #[command(flatten)]
        target: crate::cli::Target,
        /// The control file to seed from.
        #[arg(long, value_name = "FILE")]
        from: PathBuf,
    },
    /// Stop reporting a retired node as missing.
    Forget {
        #[command(flatten)]
        target: crate::cli::Target,
        /// Node name.
        name: String,
    },
}

#[derive(Subcommand)]
pub enum RolloutCommand {
    /// The change being rolled out (or the last one), its phase, each wave and node (waiting,
    /// tasting, serving, refused, crashed, rolled back), why it halted; read from etcd.
    Status {
        #[command(flatten)]
        target: crate::cli::Target,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Continue a halted rollout from the wave it halted in (its nodes are judged afresh).
    Resume {
        #[command(flatten)]
        target: crate::cli::Target,
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
        target: crate::cli::Target,
        /// The rollout of the nodes' config/zone/GeoIP bundles, not of the control state.
        #[arg(long)]
        bundles: bool,
    },
    /// Replace a missing or unreadable rollout state (every node holds meanwhile) with one
    /// settled on the last version every node serves by its own report — never the newest;
    /// the coordinator then rolls the newest out again, wave by wave.
    Reset {
        #[command(flatten)]
        target: crate::cli::Target,
    },
}

#[derive(Subcommand)]
pub enum SafetyCommand {
    /// Evaluate a candidate control file: the safety rules (against the control state now and
    /// its history) and the loader; exit 1 naming each broken rule or problem.
    Check {
        #[command(flatten)]
        target: crate::cli::Target,
        /// The candidate control file.
        file: PathBuf,
        #[command(flatten)]
        overrides: crate::cli::safety::OverrideArgs,
    },
}

#[derive(Subcommand)]
pub enum DrillCommand {
    /// The configured drills, one per line, name first.
    List {
        #[command(flatten)]
        target: crate::cli::Target,
    },
    /// Run a drill now against the running server: checks before, the change, checks while
    /// it is held, the revert; prints the measured times (ms) and records the run.
    Run {
        #[command(flatten)]
        target: crate::cli::Target,
        name: String,
        /// The server's DNS address (default: the config's first listen address).
        #[arg(long, value_name = "ADDR")]
        dns: Option<std::net::SocketAddr>,
    },
}

#[derive(Subcommand)]
pub enum TenantCommand {
    /// Every tenant, one per line: name, state, serial, names, last refusal.
    List {
        #[command(flatten)]
        target: crate::cli::Target,
        /// Print the raw JSON of /v1/tenants.
        #[arg(long)]
        json: bool,
    },
    /// One tenant: its served version and serial, names, and its last refusal with the
    /// reason (file, line, field).
    Show {
        #[command(flatten)]
        target: crate::cli::Target,
        name: String,
        /// Print the raw JSON of /v1/tenants/NAME.
        #[arg(long)]
        json: bool,
    },
    /// Put FILE (`<tenant>.toml`) as the tenant's document: through the running server
    /// (checked, tasted and served before it answers), else into the tenants folder.
    Put {
        #[command(flatten)]
        target: crate::cli::Target,
        file: PathBuf,
    },
    /// Remove a tenant's document: its names answer as the platform wildcard's again.
    Delete {
        #[command(flatten)]
        target: crate::cli::Target,
        name: String,
    },
    /// A tenant's recorded versions (`tenants/.history/<name>/`), oldest first.
    History {
        #[command(flatten)]
        target: crate::cli::Target,
        name: String,
    },
    /// Put an earlier version back (default: the one before the version served); it is
    /// served under a new serial.
    Rollback {
        #[command(flatten)]
        target: crate::cli::Target,
        name: String,
        version: Option<u64>,
    },
    /// The lines that differ between two versions (default: the two newest).
    Diff {
        #[command(flatten)]
        target: crate::cli::Target,
        name: String,
        a: Option<u64>,
        b: Option<u64>,
    },
    /// Put every `<tenant>.toml` of DIR, one by one; each is refused or served on its own.
    Import {
        #[command(flatten)]
        target: crate::cli::Target,
        dir: PathBuf,
    },
    /// Move a tenant onto the quarantine cells (`[topology.cells] quarantine`), shared with no
    /// healthy tenant: its document's `state = "quarantined"`, a recorded change like any other.
    Quarantine {
        #[command(flatten)]
        target: crate::cli::Target,
        name: String,
    },
    /// Undo `tenant quarantine`: the tenant answers from its own shard of the cells again.
    Release {
        #[command(flatten)]
        target: crate::cli::Target,
        name: String,
    },
    /// The impaired cells and the tenants whose shards explain them: the suspects, how many
    /// tenants tie, how many would hold the same cells by chance, and the verdict.
    Blame {
        #[command(flatten)]
        target: crate::cli::Target,
        /// Print the raw JSON of the status's `cells` block.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Subcommand)]
pub enum CellCommand {
    /// Leave a cell out of every tenant answer that still has another cell of the tenant's
    /// shard in that layer (`steerdns cell drain global g3`; a change like any other).
    Drain {
        #[command(flatten)]
        target: crate::cli::Target,
        /// `global`, or the region or fallback site whose cells it is, e.g. eu-north.
        layer: String,
        /// The cell's name in `[topology.cells]`.
        cell: String,
        #[command(flatten)]
        write: crate::cli::WriteArgs,
    },
    /// Undo `cell drain`: the cell is in its tenants' answers again.
    Undrain {
        #[command(flatten)]
        target: crate::cli::Target,
        /// `global`, or the region or fallback site whose cells it is.
        layer: String,
        cell: String,
        #[command(flatten)]
        write: crate::cli::WriteArgs,
    },
}

#[derive(Subcommand)]
pub enum GateCommand {
    /// Set a gate, e.g. `steerdns gate set break-glass armed` (a change like any other).
    Set {
        #[command(flatten)]
        target: crate::cli::Target,
        name: String,
        value: String,
        #[command(flatten)]
        write: crate::cli::WriteArgs,
    },
    /// Remove a gate (`steerdns gate clear break-glass`).
    Clear {
        #[command(flatten)]
        target: crate::cli::Target,
        name: String,
        #[command(flatten)]
        write: crate::cli::WriteArgs,
    },
}

#[derive(Subcommand)]
pub enum OverrideCommand {
    /// Every node forgets its local override and serves the fleet's version again (etcd's
    /// newest, else the one the override replaced): the way out of an override in conflict
    /// with a newer version written to etcd meanwhile.
    Drop {
        #[command(flatten)]
        target: crate::cli::Target,
    },
}

#[derive(Subcommand)]
pub enum ControlCommand {
    /// List accepted control versions (serial, time, source, what changed).
    History {
        #[command(flatten)]
        target: crate::cli::Target,
    },
    /// Restore an accepted version (default: the one before the newest); validated first.
    Rollback {
        #[command(flatten)]
        target: crate::cli::Target,
        /// Serial to restore.
        version: Option<u64>,
        #[command(flatten)]
        write: crate::cli::WriteArgs,
    },
    /// A fleet node's local override (sent with `--direct` while etcd was down).
    #[command(subcommand)]
    Override(OverrideCommand),
    /// Show what differs between two accepted versions.
    Diff {
        #[command(flatten)]
        target: crate::cli::Target,
        /// Older serial (see `steerdns control history`).
        a: u64,
        /// Newer serial.
        b: u64,
    },
}

#[derive(Subcommand)]
pub enum GeoipCommand {
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
pub struct SourceArgs {
    /// Config file (TOML). Default: ./steerdns.toml if it exists, else built-in defaults; with
    /// --zones and no --config, always built-in defaults (./steerdns.toml is not read).
    #[arg(long, short)]
    pub config: Option<PathBuf>,
    /// Directory of zone files (<origin>.zone); overrides the config file.
    #[arg(long)]
    pub zones: Option<PathBuf>,
}

#[derive(clap::Args, Default)]
pub struct ServeArgs {
    #[command(flatten)]
    pub source: SourceArgs,
    /// Address to listen on (UDP and TCP), repeatable; overrides the config file.
    #[arg(long, value_name = "ADDR")]
    pub listen: Vec<SocketAddr>,
    /// Address of the admin HTTP endpoint (status, metrics, reload, load feeds); overrides
    /// [admin] listen. `off` runs without one (no status, metrics, reload or pushed feeds;
    /// SIGHUP still reloads).
    #[arg(long, value_name = "ADDR|off", value_parser = parse_admin_listen)]
    pub admin_listen: Option<AdminListen>,
    /// This node's NSID (`dig +nsid`); overrides [server] nsid, also across reloads. For
    /// fleets sharing one config file, e.g. `--nsid "$NODE_NAME"` in Kubernetes.
    #[arg(long, value_name = "TEXT")]
    pub nsid: Option<String>,
    /// This node's answer to `CH TXT id.server` / `hostname.bind`; overrides [server] identity,
    /// also across reloads.
    #[arg(long, value_name = "TEXT")]
    pub identity: Option<String>,
    /// This node's name in the fleet (`[fleet] node`): its registry key in etcd and its line in
    /// `steerdns fleet status`. Like `--nsid`, for fleets that share one config file.
    #[arg(long, value_name = "NAME")]
    pub node: Option<String>,
    /// Log format on stderr: `text` for people, `json` (one object per line) for log shippers.
    /// The level comes from STEERDNS_LOG (default `info`); queries are logged only when
    /// `[server] query_log_sample` is set.
    #[arg(long, value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
}

/// `--admin-listen`: an address, or `off`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AdminListen {
    Off,
    At(SocketAddr),
}

pub fn parse_admin_listen(text: &str) -> Result<AdminListen, String> {
    if text.eq_ignore_ascii_case("off") {
        return Ok(AdminListen::Off);
    }
    text.parse()
        .map(AdminListen::At)
        .map_err(|e| format!("{e}: expected an address such as 127.0.0.1:5380, or `off`"))
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    #[default]
    Text,
    Json,
}
