//! What a run writes: `timeline.csv`, `plot.svg` (with the `tools` feature, [`super::plot`])
//! and a short text summary.

use std::fmt::Write as _;
use std::path::Path;

use super::{SimError, SimResult};

/// Writes `timeline.csv` and (with the `tools` feature) `plot.svg` into `dir` (created if
/// missing).
pub fn write_outputs(result: &SimResult, dir: &Path) -> Result<(), SimError> {
    let write_error = |path: &Path| {
        let path = path.to_path_buf();
        move |error| SimError::Write { path, error }
    };
    std::fs::create_dir_all(dir).map_err(write_error(dir))?;
    let csv = dir.join("timeline.csv");
    std::fs::write(&csv, timeline_csv(result)).map_err(write_error(&csv))?;
    #[cfg(feature = "tools")]
    {
        let svg = dir.join("plot.svg");
        std::fs::write(&svg, super::plot::plot_svg(result)?).map_err(write_error(&svg))?;
    }
    Ok(())
}

/// One row per tick: per region demand, load, capacity, utilisation, shed fraction and where
/// its clients land; per site base load, load, capacity, utilisation.
pub fn timeline_csv(result: &SimResult) -> String {
    let mut out = String::from("t,global_share");
    for name in &result.region_names {
        for column in [
            "demand",
            "load",
            "capacity",
            "utilisation",
            "shed_fraction",
            "destinations",
        ] {
            let _ = write!(out, ",{name}.{column}");
        }
    }
    for name in &result.site_names {
        for column in ["base_load", "load", "capacity", "utilisation"] {
            let _ = write!(out, ",{name}.{column}");
        }
    }
    out.push('\n');
    for tick in &result.ticks {
        let _ = write!(out, "{},{:.4}", tick.t, tick.global_share);
        for region in &tick.regions {
            let destinations: Vec<String> = region
                .destinations
                .iter()
                .map(|(d, share)| format!("{}={share:.3}", result.destination_name(*d)))
                .collect();
            let _ = write!(
                out,
                ",{:.2},{:.2},{:.2},{:.4},{:.4},{}",
                region.demand,
                region.load,
                region.capacity,
                region.utilisation(),
                region.shed_fraction,
                destinations.join(";")
            );
        }
        for site in &tick.sites {
            let _ = write!(
                out,
                ",{:.2},{:.2},{:.2},{:.4}",
                site.demand,
                site.load,
                site.capacity,
                site.utilisation()
            );
        }
        out.push('\n');
    }
    out
}

/// Peak utilisation per region and site, overloaded client-seconds, how long overloads
/// lasted, and when traffic was back on global anycast.
pub fn summary_text(result: &SimResult) -> String {
    let s = &result.summary;
    let mut out = format!(
        "scenario {} with the shield {}\n{:<12} {:>10} {:>7} {:>12} {:>22}\n",
        result.scenario,
        if result.shield_on { "on" } else { "off" },
        "node",
        "peak util",
        "at (s)",
        "overloaded s",
        "overload from..to (s)"
    );
    for n in &s.nodes {
        let span = match (n.first_overload, n.last_overload) {
            (Some(a), Some(b)) => format!("{a}..{}", b + 1),
            _ => "-".into(),
        };
        let name = if n.is_site {
            format!("{} (fb)", n.name)
        } else {
            n.name.clone()
        };
        let _ = writeln!(
            out,
            "{:<12} {:>10.3} {:>7} {:>12} {:>22}",
            name, n.peak_utilisation, n.peak_at, n.overloaded_secs, span
        );
    }
    let _ = writeln!(
        out,
        "overloaded client-seconds: {:.0} (load units x s on regions and sites above 1.0)",
        s.overloaded_client_seconds
    );
    let back = match (s.back_to_global_at, s.last_event_end) {
        (Some(at), Some(end)) if at > end => format!(
            "{at} s ({} s after the last event ended at {end} s)",
            at - end
        ),
        (Some(at), Some(end)) => format!("{at} s (the last event ended at {end} s)"),
        (Some(at), None) => format!("{at} s"),
        (None, _) => "not by the end of the run".into(),
    };
    let _ = writeln!(
        out,
        "back to global anycast (no shedding, >= 99% global answers): {back}"
    );
    if s.unmapped_answers > 0 {
        let _ = writeln!(
            out,
            "warning: {} answers matched no known address",
            s.unmapped_answers
        );
    }
    out
}

/// One line on how consistently the nameservers answered (`--nameservers`).
pub fn consistency_text(c: &super::Consistency) -> String {
    format!(
        "{} nameservers {}: {} of {} client subnets got different answers from different \
         nameservers ({} subnet-seconds; {} answer flips from asking another nameserver)\n",
        c.nameservers,
        if c.leader {
            "with the fleet shield leader"
        } else {
            "each deciding alone"
        },
        c.inconsistent_subnets,
        c.subnets,
        c.inconsistent_subnet_seconds,
        c.flips
    )
}
