//! The simulation's plot (`plot.svg`): utilisation per region and site with the watermarks,
//! and shed fraction per region. Needs `plotters`, so it is built with the `tools` feature
//! only (on by default; a server built without it writes no plot).

use plotters::prelude::*;

use super::{NodeSample, SimError, SimResult, Tick};

/// Line colours (colour-blind friendly first, then distinct extras), cycled.
const COLOURS: [RGBColor; 12] = [
    RGBColor(0, 114, 178),
    RGBColor(230, 159, 0),
    RGBColor(0, 158, 115),
    RGBColor(204, 121, 167),
    RGBColor(86, 180, 233),
    RGBColor(213, 94, 0),
    RGBColor(240, 228, 66),
    RGBColor(0, 0, 0),
    RGBColor(0, 128, 128),
    RGBColor(153, 0, 0),
    RGBColor(102, 51, 153),
    RGBColor(0, 102, 51),
];

/// Points drawn per line at most (longer runs are thinned evenly).
const MAX_POINTS: usize = 2000;

fn plot_error<E: std::fmt::Display>(e: E) -> SimError {
    SimError::Plot(e.to_string())
}

/// The series of one node, thinned to at most [`MAX_POINTS`].
fn series(ticks: &[Tick], value: impl Fn(&Tick) -> f64) -> Vec<(f64, f64)> {
    let every = ticks.len().div_ceil(MAX_POINTS).max(1);
    ticks
        .iter()
        .enumerate()
        .filter(|(i, _)| i % every == 0 || i + 1 == ticks.len())
        .map(|(_, t)| (t.t as f64, value(t)))
        .collect()
}

/// Two panels: utilisation per region and site with the watermarks, and shed fraction per
/// region.
pub fn plot_svg(result: &SimResult) -> Result<String, SimError> {
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (1200, 960)).into_drawing_area();
        root.fill(&WHITE).map_err(plot_error)?;
        let (top, bottom) = root.split_vertically(560);
        draw_utilisation(result, &top)?;
        draw_shed(result, &bottom)?;
        root.present().map_err(plot_error)?;
    }
    Ok(svg)
}

type Area<'a> = DrawingArea<SVGBackend<'a>, plotters::coord::Shift>;

fn finite(u: f64) -> f64 {
    if u.is_finite() {
        u
    } else {
        10.0
    }
}

fn draw_utilisation(result: &SimResult, area: &Area<'_>) -> Result<(), SimError> {
    let end = result.ticks.last().map_or(1.0, |t| t.t as f64).max(1.0);
    let peak = result
        .summary
        .nodes
        .iter()
        .map(|n| finite(n.peak_utilisation))
        .fold(1.1, f64::max);
    let title = format!(
        "{}: utilisation per region and fallback site (shield {})",
        result.scenario,
        if result.shield_on { "on" } else { "off" }
    );
    let mut chart = ChartBuilder::on(area)
        .caption(title, ("sans-serif", 22))
        .margin(12)
        .x_label_area_size(45)
        .y_label_area_size(65)
        .build_cartesian_2d(0.0..end, 0.0..(peak * 1.05))
        .map_err(plot_error)?;
    chart
        .configure_mesh()
        .x_desc("time (s)")
        .x_label_formatter(&|x| format!("{x:.0}"))
        .y_desc("utilisation (load / capacity)")
        .label_style(("sans-serif", 14))
        .draw()
        .map_err(plot_error)?;
    let nodes = result
        .region_names
        .iter()
        .enumerate()
        .map(|(r, name)| (name.clone(), Pick::Region(r)))
        .chain(
            result
                .site_names
                .iter()
                .enumerate()
                .map(|(s, name)| (format!("{name} (fallback)"), Pick::Site(s))),
        );
    for (i, (name, pick)) in nodes.enumerate() {
        let colour = COLOURS[i % COLOURS.len()];
        let points = series(&result.ticks, |t| finite(pick.sample(t).utilisation()));
        chart
            .draw_series(LineSeries::new(points, colour.stroke_width(2)))
            .map_err(plot_error)?
            .label(name)
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], colour.stroke_width(2))
            });
    }
    let marks = [
        ("overload (1.0)", 1.0, RED),
        ("high watermark", result.high_watermark, BLACK),
        (
            "low watermark",
            result.low_watermark,
            RGBColor(128, 128, 128),
        ),
    ];
    for (label, level, colour) in marks {
        chart
            .draw_series(DashedLineSeries::new(
                vec![(0.0, level), (end, level)],
                8,
                5,
                colour.stroke_width(1),
            ))
            .map_err(plot_error)?
            .label(format!("{label} {level:.2}"))
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], colour.stroke_width(1))
            });
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .label_font(("sans-serif", 13))
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(plot_error)
}

fn draw_shed(result: &SimResult, area: &Area<'_>) -> Result<(), SimError> {
    let end = result.ticks.last().map_or(1.0, |t| t.t as f64).max(1.0);
    let top = result
        .ticks
        .iter()
        .flat_map(|t| t.regions.iter().map(|r| r.shed_fraction))
        .fold(0.1, f64::max);
    let mut chart = ChartBuilder::on(area)
        .caption("shed fraction per region", ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(45)
        .y_label_area_size(65)
        .build_cartesian_2d(0.0..end, 0.0..(top * 1.1).min(1.0))
        .map_err(plot_error)?;
    chart
        .configure_mesh()
        .x_desc("time (s)")
        .x_label_formatter(&|x| format!("{x:.0}"))
        .y_desc("share of client subnets shed")
        .label_style(("sans-serif", 14))
        .draw()
        .map_err(plot_error)?;
    for (r, name) in result.region_names.iter().enumerate() {
        let colour = COLOURS[r % COLOURS.len()];
        let points = series(&result.ticks, |t| t.regions[r].shed_fraction);
        chart
            .draw_series(LineSeries::new(points, colour.stroke_width(2)))
            .map_err(plot_error)?
            .label(name.clone())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], colour.stroke_width(2))
            });
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .label_font(("sans-serif", 13))
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(plot_error)
}

#[derive(Clone, Copy)]
enum Pick {
    Region(usize),
    Site(usize),
}

impl Pick {
    fn sample(self, tick: &Tick) -> &NodeSample {
        match self {
            Pick::Region(r) => &tick.regions[r],
            Pick::Site(s) => &tick.sites[s],
        }
    }
}

/// One line of the tenants' plot: its label, colour and value per tick.
type TenantLine<'a> = (
    &'a str,
    RGBColor,
    &'a dyn Fn(&super::tenants::TenantTick) -> f64,
);

/// `tenants.svg`: per second, the collateral client-seconds moved (other tenants' clients
/// whose answers changed) with tenant-first and with region-wide shedding, and the hottest
/// region's utilisation in both runs.
pub fn plot_tenants_svg(c: &super::tenants::TenantComparison) -> Result<String, SimError> {
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (1200, 900)).into_drawing_area();
        root.fill(&WHITE).map_err(plot_error)?;
        let (top, bottom) = root.split_vertically(500);
        let end = c.ticks.last().map_or(1.0, |t| t.t as f64).max(1.0);
        let every = c.ticks.len().div_ceil(MAX_POINTS).max(1);
        let series = |value: &dyn Fn(&super::tenants::TenantTick) -> f64| -> Vec<(f64, f64)> {
            c.ticks
                .iter()
                .enumerate()
                .filter(|(i, _)| i % every == 0 || i + 1 == c.ticks.len())
                .map(|(_, t)| (t.t as f64, finite(value(t))))
                .collect()
        };
        let peak = c
            .ticks
            .iter()
            .map(|t| t.collateral_region_wide.max(t.collateral_tenant_first))
            .fold(1.0, f64::max);
        let title = format!(
            "{}: collateral client-seconds moved per second (total: tenant-first {:.0}, \
             region-wide {:.0})",
            c.scenario, c.collateral_tenant_first, c.collateral_region_wide
        );
        let mut chart = ChartBuilder::on(&top)
            .caption(title, ("sans-serif", 20))
            .margin(12)
            .x_label_area_size(45)
            .y_label_area_size(65)
            .build_cartesian_2d(0.0..end, 0.0..(peak * 1.1))
            .map_err(plot_error)?;
        chart
            .configure_mesh()
            .x_desc("time (s)")
            .x_label_formatter(&|x| format!("{x:.0}"))
            .y_desc("other tenants' clients moved")
            .label_style(("sans-serif", 14))
            .draw()
            .map_err(plot_error)?;
        let lines: [TenantLine<'_>; 2] = [
            ("tenant-first shedding", COLOURS[2], &|t| {
                t.collateral_tenant_first
            }),
            ("region-wide shedding", COLOURS[5], &|t| {
                t.collateral_region_wide
            }),
        ];
        for (label, colour, value) in lines {
            chart
                .draw_series(LineSeries::new(series(value), colour.stroke_width(2)))
                .map_err(plot_error)?
                .label(label)
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 20, y)], colour.stroke_width(2))
                });
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperRight)
            .label_font(("sans-serif", 13))
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .draw()
            .map_err(plot_error)?;
        let hottest = c
            .ticks
            .iter()
            .map(|t| t.hottest_region_wide.max(t.hottest_tenant_first))
            .fold(1.1, f64::max);
        let mut chart = ChartBuilder::on(&bottom)
            .caption("hottest region's utilisation", ("sans-serif", 20))
            .margin(12)
            .x_label_area_size(45)
            .y_label_area_size(65)
            .build_cartesian_2d(0.0..end, 0.0..(finite(hottest) * 1.05))
            .map_err(plot_error)?;
        chart
            .configure_mesh()
            .x_desc("time (s)")
            .x_label_formatter(&|x| format!("{x:.0}"))
            .y_desc("load / capacity")
            .label_style(("sans-serif", 14))
            .draw()
            .map_err(plot_error)?;
        let lines: [TenantLine<'_>; 2] = [
            ("tenant-first shedding", COLOURS[2], &|t| {
                t.hottest_tenant_first
            }),
            ("region-wide shedding", COLOURS[5], &|t| {
                t.hottest_region_wide
            }),
        ];
        for (label, colour, value) in lines {
            chart
                .draw_series(LineSeries::new(series(value), colour.stroke_width(2)))
                .map_err(plot_error)?
                .label(label)
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 20, y)], colour.stroke_width(2))
                });
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperRight)
            .label_font(("sans-serif", 13))
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .draw()
            .map_err(plot_error)?;
        root.present().map_err(plot_error)?;
    }
    Ok(svg)
}
