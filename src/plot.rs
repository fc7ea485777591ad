//! Bench charts in the manner of the classic "IOPS and CPU by block size,
//! with and without RDMA" figures: for each direction and measure
//! (throughput, IOPS, host CPU per I/O), one figure with a panel per
//! setting measured (queue depth, MTU, data digest), the block sizes along
//! x, one line per transport and offload set with the repetitions' range
//! as error bars, and the legend above the panels, as SVG and PNG.
//!
//! It draws what was measured; it must never measure or judge a point.

use crate::bench::point::Point;
use crate::workload::Rw;
use plotters::coord::ranged1d::{IntoSegmentedCoord, SegmentValue};
use plotters::prelude::*;
use std::path::{Path, PathBuf};
use std::sync::Once;

/// Why charts could not be written.
#[derive(Debug, thiserror::Error)]
pub enum PlotError {
    #[error("cannot create {}: {source}", path.display())]
    CreateDir { path: PathBuf, source: std::io::Error },
    /// Drawing or writing a chart failed (the backend's own error).
    #[error("{0}")]
    Draw(Box<dyn std::error::Error + Send + Sync>),
}

/// Fonts tried for PNG text (SVG needs none).
const FONTS: [&str; 4] = [
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
];

static FONT: Once = Once::new();

/// Register a TrueType font for bitmap output; false if none was found.
fn font() -> bool {
    FONT.call_once(|| {
        if let Some(bytes) = FONTS.iter().find_map(|p| std::fs::read(p).ok()) {
            let _ = plotters::style::register_font(
                "sans-serif",
                FontStyle::Normal,
                Box::leak(bytes.into_boxed_slice()),
            );
        }
    });
    FONTS.iter().any(|p| Path::new(p).exists())
}

/// What a figure shows of each point: the median and the range.
struct Measure {
    file: &'static str,
    title: &'static str,
    unit: &'static str,
    value: fn(&Point) -> f64,
    range: fn(&Point) -> [f64; 2],
}

const MEASURES: [Measure; 3] = [
    Measure {
        file: "throughput",
        title: "throughput",
        unit: "MiB/s",
        value: |p| p.median.bytes_per_sec / 1048576.0,
        range: |p| p.bytes_per_sec_range.map(|v| v / 1048576.0),
    },
    Measure {
        file: "iops",
        title: "IOPS",
        unit: "thousand IOPS",
        value: |p| p.median.iops / 1e3,
        range: |p| p.iops_range.map(|v| v / 1e3),
    },
    Measure {
        file: "host-cpu",
        title: "host CPU per I/O",
        unit: "host CPU µs per I/O",
        value: |p| p.median.host_cpu_ns_per_io / 1e3,
        range: |p| p.host_cpu_ns_per_io_range.map(|v| v / 1e3),
    },
];

const COLORS: [RGBColor; 6] = [RED, BLUE, GREEN, MAGENTA, CYAN, BLACK];
const PANEL: (u32, u32) = (560, 400);
const LEGEND_ROW: u32 = 24;

/// The points of one direction, laid out: block sizes (x), lines, panels.
struct Figure<'a> {
    rw: Rw,
    sizes: Vec<u32>,
    /// Several transports: lines are named by transport and offload set.
    transports: bool,
    /// Line names, in the order they first appear; a line's color is its index.
    lines: Vec<String>,
    /// A title ("qd 32, MTU 9000, data digest on") and its points each.
    panels: Vec<(String, Vec<&'a Point>)>,
}

impl<'a> Figure<'a> {
    fn new(points: &'a [Point], rw: Rw) -> Self {
        let of_rw: Vec<&Point> = points.iter().filter(|p| p.setting.rw == rw).collect();
        let mut sizes: Vec<u32> = of_rw.iter().map(|p| p.setting.bs).collect();
        sizes.sort_unstable();
        sizes.dedup();
        let transports = of_rw.iter().any(|p| p.setting.transport != of_rw[0].setting.transport);
        let mut lines: Vec<String> = Vec::new();
        let mut settings: Vec<(u16, usize, bool)> = Vec::new();
        for p in &of_rw {
            let name = line_of(p, transports);
            if !lines.contains(&name) {
                lines.push(name);
            }
            settings.push((p.setting.qd, p.setting.mtu, p.setting.ddgst));
        }
        settings.sort_unstable();
        settings.dedup();
        let panels = settings
            .into_iter()
            .map(|(qd, mtu, ddgst)| {
                let title =
                    format!("qd {qd}, MTU {mtu}, data digest {}", if ddgst { "on" } else { "off" });
                let pts = of_rw.iter().copied().filter(|p| {
                    let s = &p.setting;
                    (s.qd, s.mtu, s.ddgst) == (qd, mtu, ddgst)
                });
                (title, pts.collect())
            })
            .collect();
        Self { rw, sizes, transports, lines, panels }
    }

    /// Panels per row and rows.
    fn grid(&self) -> (usize, usize) {
        let n = self.panels.len().max(1);
        let cols = (n as f64).sqrt().ceil() as usize;
        (cols, n.div_ceil(cols))
    }

    /// The panels' area, then the whole figure's with title and legend.
    fn panels_size(&self) -> (u32, u32) {
        let (cols, rows) = self.grid();
        (PANEL.0 * cols as u32, PANEL.1 * rows as u32)
    }

    fn size(&self) -> (u32, u32) {
        let (w, h) = self.panels_size();
        (w, 40 + self.legend_rows() * LEGEND_ROW + h)
    }

    /// Legend entries placed left to right, wrapping: (row, x) of each.
    fn legend(&self) -> Vec<(u32, u32)> {
        let width = self.panels_size().0;
        let (mut row, mut x) = (0, 16);
        self.lines
            .iter()
            .map(|name| {
                let w = 40 + 8 * name.len() as u32;
                if x + w > width && x > 16 {
                    (row, x) = (row + 1, 16);
                }
                let at = (row, x);
                x += w;
                at
            })
            .collect()
    }

    fn legend_rows(&self) -> u32 {
        self.legend().last().map_or(0, |&(row, _)| row + 1)
    }

    fn draw<DB: DrawingBackend>(
        &self,
        root: DrawingArea<DB, plotters::coord::Shift>,
        m: &Measure,
    ) -> Result<(), PlotError>
    where
        DB::ErrorType: 'static,
    {
        let err = |e: DrawingAreaErrorKind<DB::ErrorType>| PlotError::Draw(Box::new(e));
        root.fill(&WHITE).map_err(err)?;
        let title = format!("{}: {} by block size", self.rw.name(), m.title);
        let root = root.titled(&title, ("sans-serif", 22)).map_err(err)?;
        let (top, grid) = root.split_vertically(self.legend_rows() * LEGEND_ROW + 8);
        for ((name, (row, x)), color) in
            self.lines.iter().zip(self.legend()).zip(COLORS.iter().cycle())
        {
            let y = (row * LEGEND_ROW + LEGEND_ROW / 2) as i32;
            let x = x as i32;
            let line = PathElement::new(vec![(x, y), (x + 24, y)], color.stroke_width(2));
            top.draw(&line).map_err(err)?;
            top.draw(&Circle::new((x + 12, y), 4, color.filled())).map_err(err)?;
            let text = Text::new(name.clone(), (x + 30, y - 7), ("sans-serif", 15));
            top.draw(&text).map_err(err)?;
        }
        let (cols, rows) = self.grid();
        for ((panel, points), area) in self.panels.iter().zip(grid.split_evenly((rows, cols))) {
            self.draw_panel(&area, panel, points, m).map_err(err)?;
        }
        root.present().map_err(err)
    }

    fn draw_panel<DB: DrawingBackend>(
        &self,
        area: &DrawingArea<DB, plotters::coord::Shift>,
        title: &str,
        points: &[&Point],
        m: &Measure,
    ) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
        let top = points.iter().map(|p| (m.range)(p)[1].max((m.value)(p))).fold(0.0, f64::max);
        let last = self.sizes.len().saturating_sub(1) as i32;
        let mut chart = ChartBuilder::on(area)
            .caption(title, ("sans-serif", 16))
            .margin(10)
            .x_label_area_size(36)
            .y_label_area_size(64)
            .build_cartesian_2d((0..last).into_segmented(), 0.0..(top * 1.1).max(1e-9))?;
        let sizes = &self.sizes;
        chart
            .configure_mesh()
            .disable_x_mesh()
            .light_line_style(WHITE)
            .x_desc("block size")
            .y_desc(m.unit)
            .y_label_formatter(&|v| match top {
                t if t >= 10.0 => format!("{v:.0}"),
                _ => format!("{v:.2}"),
            })
            .x_labels(sizes.len())
            .x_label_formatter(&|x| match x {
                SegmentValue::CenterOf(i) => {
                    sizes.get(*i as usize).map(|&b| size_label(b)).unwrap_or_default()
                }
                _ => String::new(),
            })
            .draw()?;
        for (name, color) in self.lines.iter().zip(COLORS.iter().cycle()) {
            let mut pts: Vec<(i32, &Point)> = points
                .iter()
                .filter(|p| line_of(p, self.transports) == *name)
                .filter_map(|p| Some((sizes.iter().position(|&b| b == p.setting.bs)? as i32, *p)))
                .collect();
            pts.sort_by_key(|&(i, _)| i);
            let at = |i: i32| SegmentValue::CenterOf(i);
            let line = pts.iter().map(|&(i, p)| (at(i), (m.value)(p)));
            chart.draw_series(LineSeries::new(line, color.stroke_width(2)))?;
            chart.draw_series(pts.iter().map(|&(i, p)| {
                let [lo, hi] = (m.range)(p);
                ErrorBar::new_vertical(at(i), lo, (m.value)(p), hi, color.stroke_width(1), 10)
            }))?;
            chart.draw_series(
                pts.iter().map(|&(i, p)| Circle::new((at(i), (m.value)(p)), 4, color.filled())),
            )?;
        }
        Ok(())
    }
}

/// A line per transport (named when there are several) and offload set.
fn line_of(p: &Point, transports: bool) -> String {
    match transports {
        true => format!("{} {}", p.setting.transport.name(), p.setting.offload),
        false => p.setting.offload.to_string(),
    }
}

fn size_label(b: u32) -> String {
    match b {
        b if b >= 1 << 20 && b % (1 << 20) == 0 => format!("{}M", b >> 20),
        b if b >= 1 << 10 && b % (1 << 10) == 0 => format!("{}k", b >> 10),
        b => b.to_string(),
    }
}

/// Write the charts into `dir`; returns the files written.
pub fn charts(points: &[Point], dir: &Path) -> Result<Vec<PathBuf>, PlotError> {
    std::fs::create_dir_all(dir)
        .map_err(|source| PlotError::CreateDir { path: dir.into(), source })?;
    let png = font();
    let mut written = Vec::new();
    let mut rws: Vec<Rw> = Vec::new();
    for p in points {
        if !rws.contains(&p.setting.rw) {
            rws.push(p.setting.rw);
        }
    }
    rws.sort_unstable_by_key(|rw| rw.name());
    for rw in rws {
        let fig = Figure::new(points, rw);
        let size = fig.size();
        for m in &MEASURES {
            let svg = dir.join(format!("{}-{}.svg", rw.name(), m.file));
            fig.draw(SVGBackend::new(&svg, size).into_drawing_area(), m)?;
            written.push(svg);
            if png {
                let file = dir.join(format!("{}-{}.png", rw.name(), m.file));
                fig.draw(BitMapBackend::new(&file, size).into_drawing_area(), m)?;
                written.push(file);
            }
        }
    }
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::options::Setting;
    use crate::bench::point::Measures;
    use ulp_ddp::Caps;

    fn point(qd: u16, bs: u32, offload: Caps, iops: f64) -> Point {
        let setting =
            Setting { rw: Rw::Read, qd, bs, mtu: 9000, ddgst: true, offload, ..Setting::default() };
        let median = Measures { iops, ..Measures::default() };
        Point { setting, median, iops_range: [iops * 0.9, iops * 1.2], ..Point::default() }
    }

    #[test]
    fn a_panel_per_setting_each_size_labelled_once_with_error_bars() {
        let mut points = Vec::new();
        for qd in [1, 32] {
            for bs in [4096, 131072] {
                points.push(point(qd, bs, Caps::NONE, 10e3));
                points.push(point(qd, bs, Caps::ALL, 20e3));
            }
        }
        assert!(font(), "a TrueType font (fonts-dejavu-core)");
        let fig = Figure::new(&points, Rw::Read);
        let mut svg = String::new();
        let root = SVGBackend::with_string(&mut svg, fig.size()).into_drawing_area();
        fig.draw(root, &MEASURES[1]).unwrap();
        for title in ["read: IOPS by block size", "qd 1, MTU 9000", "qd 32, MTU 9000"] {
            assert_eq!(svg.matches(title).count(), 1, "{title}");
        }
        for label in ["\n4k\n", "\n128k\n"] {
            assert_eq!(svg.matches(label).count(), 2, "{label:?} once in each panel");
        }
        assert_eq!(svg.matches("\nnone\n").count(), 1, "one legend for the figure");
        // Each point's range: a vertical line and its two caps.
        for color in ["#FF0000", "#0000FF"] {
            let bars = svg.matches(&format!("<line opacity=\"1\" stroke=\"{color}\"")).count();
            assert_eq!(bars, 2 * 2 * 3, "{color}");
        }
    }
}
