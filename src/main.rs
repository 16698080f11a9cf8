//! The `steerdns` binary: command-line parsing and dispatch to the subcommands in `cli`.

mod cli;

use std::process::ExitCode;

use clap::Parser;

use cli::args::*;
use steerdns::tenant::TenantState;

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging(match &cli.command {
        Some(Command::Serve(args)) => args.log_format,
        _ => LogFormat::Text,
    });
    let result = match cli.command.unwrap_or(Command::Serve(ServeArgs::default())) {
        Command::Serve(args) => cli::serve::serve(args),
        Command::Check(args) => cli::commands::check(args),
        Command::Geoip(command) => cli::commands::geoip(command),
        Command::Weight(WeightCommand::Set {
            target,
            profile,
            assignments,
            write,
        }) => cli::weight_set(&target, &profile, &assignments, &write),
        Command::Weight(WeightCommand::Show { target, profile }) => {
            cli::weight_show(&target, profile.as_deref())
        }
        Command::Drain {
            target,
            region,
            write,
        } => cli::drain(&target, &region, true, &write),
        Command::Undrain {
            target,
            region,
            write,
        } => cli::drain(&target, &region, false, &write),
        Command::Cell(CellCommand::Drain {
            target,
            layer,
            cell,
            write,
        }) => cli::cell_drain(&target, &layer, &cell, true, &write),
        Command::Cell(CellCommand::Undrain {
            target,
            layer,
            cell,
            write,
        }) => cli::cell_drain(&target, &layer, &cell, false, &write),
        Command::Control(ControlCommand::History { target }) => cli::history_list(&target),
        Command::Control(ControlCommand::Rollback {
            target,
            version,
            write,
        }) => cli::rollback(&target, version, &write),
        Command::Control(ControlCommand::Override(OverrideCommand::Drop { target })) => {
            cli::direct::drop_override(&target)
        }
        Command::Control(ControlCommand::Diff { target, a, b }) => cli::diff(&target, a, b),
        Command::Safety(SafetyCommand::Check {
            target,
            file,
            overrides,
        }) => cli::safety::check(&target, &file, &overrides),
        Command::Tenant(TenantCommand::List { target, json }) => cli::tenant::list(&target, json),
        Command::Tenant(TenantCommand::Show { target, name, json }) => {
            cli::tenant::show(&target, &name, json)
        }
        Command::Tenant(TenantCommand::Put { target, file }) => cli::tenant::put(&target, &file),
        Command::Tenant(TenantCommand::Delete { target, name }) => {
            cli::tenant::delete(&target, &name)
        }
        Command::Tenant(TenantCommand::History { target, name }) => {
            cli::tenant::history(&target, &name)
        }
        Command::Tenant(TenantCommand::Rollback {
            target,
            name,
            version,
        }) => cli::tenant::rollback(&target, &name, version),
        Command::Tenant(TenantCommand::Diff { target, name, a, b }) => {
            cli::tenant::diff(&target, &name, a, b)
        }
        Command::Tenant(TenantCommand::Import { target, dir }) => {
            cli::tenant::import(&target, &dir)
        }
        Command::Tenant(TenantCommand::Blame { target, json }) => cli::tenant::blame(&target, json),
        Command::Tenant(TenantCommand::Quarantine { target, name }) => {
            cli::tenant::set_state(&target, &name, TenantState::Quarantined)
        }
        Command::Tenant(TenantCommand::Release { target, name }) => {
            cli::tenant::set_state(&target, &name, TenantState::Active)
        }
        Command::Drill(DrillCommand::List { target }) => cli::drill::list(&target),
        Command::Drill(DrillCommand::Run { target, name, dns }) => {
            cli::drill::run_now(&target, &name, dns)
        }
        Command::Gate(GateCommand::Set {
            target,
            name,
            value,
            write,
        }) => cli::gate(&target, &name, Some(&value), &write),
        Command::Gate(GateCommand::Clear {
            target,
            name,
            write,
        }) => cli::gate(&target, &name, None, &write),
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
        Command::Simulate(args) => cli::commands::simulate(args),
        Command::Dnssec(command) => cli::commands::dnssec(command),
        Command::Taste(args) => cli::commands::taste(args),
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
