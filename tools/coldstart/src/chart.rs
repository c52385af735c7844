//! The PNG chart: four panels — exec → first poll, a warm invocation's own time, peak RSS, Lambda
//! dollars per million updates — each with the webhook and the worker, one bar per implementation,
//! the median written above it.

use std::path::Path;

use anyhow::{anyhow, Context as _};
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::FontStyle;

use crate::report::{Figures, Results};
use crate::subjects::{Function, Implementation};

const FONT: &str = "sans-serif";
/// Where Debian's fonts-dejavu-core puts its sans-serif font; `fc-match` is asked first.
const FALLBACK_FONT: &str = "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf";

fn colour(implementation: Implementation) -> RGBColor {
    match implementation {
        Implementation::Tgq => RGBColor(214, 96, 30),
        Implementation::Node => RGBColor(67, 133, 61),
        Implementation::Python => RGBColor(53, 110, 165),
    }
}

/// Registers a system sans-serif font for the chart's text (plotters draws text with ab_glyph,
/// which needs the font's bytes).
fn load_font() -> anyhow::Result<()> {
    let matched = std::process::Command::new("fc-match")
        .args(["-f", "%{file}", "sans-serif"])
        .output()
        .ok()
        .filter(|output| output.status.success())
        .map(|output| String::from_utf8_lossy(&output.stdout).into_owned())
        .filter(|path| path.ends_with(".ttf") || path.ends_with(".otf"));
    let path = matched.unwrap_or_else(|| FALLBACK_FONT.to_owned());
    let bytes = std::fs::read(&path)
        .with_context(|| format!("reading the font {path} (install fonts-dejavu-core)"))?;
    plotters::style::register_font(FONT, FontStyle::Normal, Box::leak(bytes.into_boxed_slice()))
        .map_err(|_| anyhow!("{path} is not a font plotters can read"))
}

/// One metric of the figures, for one panel.
struct Panel {
    title: &'static str,
    unit: &'static str,
    log: bool,
    value: fn(Function, &Figures) -> f64,
}

const PANELS: [Panel; 4] = [
    Panel {
        title: "exec → first /next (config, clients, SSM)",
        unit: "ms",
        log: true,
        value: |_, figures| figures.to_next_ms.median,
    },
    Panel {
        title: "warm invocation, own time (one update)",
        unit: "ms",
        log: true,
        value: |_, figures| figures.warm_ms.median,
    },
    Panel {
        title: "peak RSS",
        unit: "MiB",
        log: false,
        value: |_, figures| figures.peak_rss_mib.median,
    },
    Panel {
        title: "Lambda $ per million updates, arm64",
        unit: "$",
        log: false,
        value: crate::cost::lambda_arm64_per_million,
    },
];

/// Draws the chart of `results` into a PNG at `path`.
pub fn draw(results: &Results, runs: usize, path: &Path) -> anyhow::Result<()> {
    load_font()?;
    let root = BitMapBackend::new(path, (2000, 560)).into_drawing_area();
    root.fill(&WHITE)?;
    let title = format!(
        "Cold start on a fake Lambda Runtime API (median of {runs} runs), warm invocation, and Lambda cost per million updates"
    );
    let root = root.titled(&title, (FONT, 24))?;
    let panels = root.split_evenly((1, PANELS.len()));
    for (index, (panel, area)) in PANELS.iter().zip(&panels).enumerate() {
        draw_panel(results, panel, area, index == 0)?;
    }
    root.present()
        .with_context(|| format!("writing {}", path.display()))?;
    Ok(())
}

fn draw_panel(
    results: &Results,
    panel: &Panel,
    area: &DrawingArea<BitMapBackend<'_>, Shift>,
    legend: bool,
) -> anyhow::Result<()> {
    let values = || {
        results
            .iter()
            .map(|((function, _), figures)| (panel.value)(*function, figures))
    };
    let highest = values().fold(0.0_f64, f64::max);
    let lowest = values().fold(f64::INFINITY, f64::min);
    let mut builder = ChartBuilder::on(area);
    builder
        .caption(panel.title, (FONT, 17))
        .margin(12)
        .x_label_area_size(30)
        .y_label_area_size(55);
    let x = 0.0..Function::ALL.len() as f64;
    // Each function is one unit wide; its bars share the middle 80 %.
    let width = 0.8 / Implementation::ALL.len() as f64;
    let bars = |function_index: usize| {
        Implementation::ALL
            .iter()
            .enumerate()
            .filter_map(move |(slot, implementation)| {
                let function = Function::ALL[function_index];
                let figures = results.get(&(function, *implementation))?;
                let left = function_index as f64 + 0.1 + slot as f64 * width;
                Some((*implementation, left, (panel.value)(function, figures)))
            })
    };
    let label = |value: f64| {
        if value >= 100.0 {
            format!("{value:.0}")
        } else if value >= 10.0 {
            format!("{value:.1}")
        } else {
            format!("{value:.2}")
        }
    };
    let x_label = |x: &f64| {
        Function::ALL
            .iter()
            .enumerate()
            .find(|(index, _)| (*x - (*index as f64 + 0.5)).abs() < 1e-6)
            .map(|(_, function)| function.to_string())
            .unwrap_or_default()
    };
    macro_rules! plot {
        ($chart:expr, $floor:expr, $above:expr) => {{
            let mut chart = $chart;
            chart
                .configure_mesh()
                .disable_x_mesh()
                .x_labels(2 * Function::ALL.len() + 1)
                .x_label_formatter(&x_label)
                .y_desc(panel.unit)
                .label_style((FONT, 14))
                .draw()?;
            for implementation in Implementation::ALL {
                let colour = colour(implementation);
                let series: Vec<(f64, f64)> = (0..Function::ALL.len())
                    .flat_map(|index| bars(index))
                    .filter(|(bar, _, _)| *bar == implementation)
                    .map(|(_, left, value)| (left, value))
                    .collect();
                if series.is_empty() {
                    continue;
                }
                let drawn = chart.draw_series(series.iter().map(|(left, value)| {
                    Rectangle::new(
                        [(*left, $floor), (*left + width * 0.9, *value)],
                        colour.filled(),
                    )
                }))?;
                if legend {
                    drawn
                        .label(implementation.to_string())
                        .legend(move |(x, y)| {
                            Rectangle::new([(x, y - 6), (x + 12, y + 6)], colour.filled())
                        });
                }
                chart.draw_series(series.iter().map(|(left, value)| {
                    Text::new(
                        label(*value),
                        (*left, $above(*value)),
                        (FONT, 13).into_font().color(&BLACK),
                    )
                }))?;
            }
            if legend {
                chart
                    .configure_series_labels()
                    .position(SeriesLabelPosition::UpperLeft)
                    .label_font((FONT, 14))
                    .background_style(WHITE.mix(0.8))
                    .border_style(BLACK.mix(0.3))
                    .draw()?;
            }
        }};
    }
    if panel.log {
        // Below every bar, so the smallest (a warm tgq invocation: a quarter of a millisecond)
        // still shows.
        let floor = (lowest / 2.0).clamp(0.01, 0.5);
        plot!(
            builder.build_cartesian_2d(x, (floor..highest * 30.0).log_scale())?,
            floor,
            |value: f64| value * 1.6
        );
    } else {
        plot!(
            builder.build_cartesian_2d(x, 0.0..highest * 1.5)?,
            0.0,
            |value: f64| value + highest * 0.06
        );
    }
    Ok(())
}
