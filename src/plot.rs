//! Bench charts in the manner of the classic "IOPS and CPU by block size,
//! with and without RDMA" figures: for each direction and measure
//! (throughput, IOPS, host CPU per I/O), one figure with a panel per
//! setting measured (queue depth, MTU, data digest, impairments), the
//! block sizes along x, one line per transport and offload set with the
//! repetitions' range as error bars, and the legend above the panels, as
//! SVG and PNG. When the matrix sweeps the loss rate, also figures against
//! it (throughput, with raw TCP's as a line of its own; p99 latency; host
//! CPU per I/O; the share of received data the NIC placed), a panel per
//! block size and the other settings.
//!
//! It draws what was measured; it must never measure or judge a point.

use crate::bench::options::Meter;
use crate::bench::point::Point;
use crate::workload::Rw;
use plotters::coord::ranged1d::{IntoSegmentedCoord, SegmentValue, SegmentedCoord, ValueFormatter};
use plotters::coord::types::RangedCoordi32;
use plotters::prelude::*;
use std::path::{Path, PathBuf};
use std::sync::Once;

/// Why charts could not be written.
#[derive(Debug, thiserror::Error)]
pub enum PlotError {
    // The io::Error is in the message, not chained as a source, so that
    // `{:#}` does not print it twice.
    #[error("cannot create {}: {error}", path.display())]
    CreateDir { path: PathBuf, error: std::io::Error },
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

/// A measure of a point: its median and its range over the repetitions.
type Of = (fn(&Point) -> f64, fn(&Point) -> [f64; 2]);

/// What a figure shows of each point: the median and the range, and of
/// raw TCP's on the same medium, if anything.
struct Measure {
    file: &'static str,
    title: &'static str,
    unit: &'static str,
    value: fn(&Point) -> f64,
    range: fn(&Point) -> [f64; 2],
    raw: Option<Of>,
    /// A logarithmic y axis, for a measure that spans orders of magnitude
    /// across block sizes (IOPS): on a linear one the large blocks' points
    /// would sit on zero.
    log: bool,
}

const MIB: f64 = 1048576.0;

const THROUGHPUT: Measure = Measure {
    file: "throughput",
    title: "throughput",
    unit: "MiB/s",
    value: |p| p.median.bytes_per_sec / MIB,
    range: |p| p.bytes_per_sec_range.map(|v| v / MIB),
    raw: None,
    log: false,
};

const HOST_CPU: Measure = Measure {
    file: "host-cpu",
    title: "host CPU per I/O",
    unit: "host CPU µs per I/O",
    value: |p| p.median.host_cpu_ns_per_io / 1e3,
    range: |p| p.host_cpu_ns_per_io_range.map(|v| v / 1e3),
    raw: None,
    log: false,
};

const HOST_INSTRUCTIONS: Measure = Measure {
    file: "host-instructions",
    title: "host instructions per I/O",
    unit: "thousand host instructions per I/O",
    value: |p| p.median.counts.host.instructions / 1e3,
    range: |p| p.host_instructions_range.unwrap_or_default().map(|v| v / 1e3),
    raw: None,
    log: false,
};

const PLACED: Measure = Measure {
    file: "placed",
    title: "share of received data the NIC placed",
    unit: "% of data bytes received",
    value: |p| p.median.offload_share * 100.0,
    range: |p| p.offload_share_range.map(|v| v * 100.0),
    raw: None,
    log: false,
};

/// The figures by block size, of points counted by Valgrind: what it
/// counted (throughput and latency under it would time Valgrind).
const COUNTED: [Measure; 2] = [
    HOST_INSTRUCTIONS,
    Measure {
        file: "host-cycles",
        title: "host estimated cycles per I/O",
        unit: "thousand estimated cycles per I/O (Valgrind's cache model)",
        value: |p| p.median.counts.host.est_cycles / 1e3,
        range: |p| [p.median.counts.host.est_cycles / 1e3; 2],
        raw: None,
        log: false,
    },
];

/// The figures against the loss rate, of points counted by Valgrind.
const LOSS_COUNTED: [Measure; 2] = [HOST_INSTRUCTIONS, PLACED];

/// The figures by block size.
const MEASURES: [Measure; 3] = [
    THROUGHPUT,
    Measure {
        file: "iops",
        title: "IOPS",
        unit: "thousand IOPS (log scale)",
        value: |p| p.median.iops / 1e3,
        range: |p| p.iops_range.map(|v| v / 1e3),
        raw: None,
        log: true,
    },
    HOST_CPU,
];

/// The figures against the loss rate.
const LOSS_MEASURES: [Measure; 4] = [
    Measure {
        raw: Some((
            |p| p.raw_tcp_bytes_per_sec / MIB,
            |p| p.raw_tcp_bytes_per_sec_range.map(|v| v / MIB),
        )),
        ..THROUGHPUT
    },
    Measure {
        file: "p99-latency",
        title: "p99 latency",
        unit: "p99 latency µs",
        value: |p| p.median.lat_p99_us,
        range: |p| p.lat_p99_us_range,
        raw: None,
        log: false,
    },
    HOST_CPU,
    PLACED,
];

/// The line of raw TCP's throughput.
const RAW_TCP: &str = "raw TCP";

const COLORS: [RGBColor; 6] = [RED, BLUE, GREEN, MAGENTA, CYAN, BLACK];
const PANEL: (u32, u32) = (560, 400);
const LEGEND_ROW: u32 = 24;

/// What a figure has along x.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Axis {
    BlockSize,
    /// The chance a frame is lost, each way.
    Loss,
}

/// A panel's place among the others: block size (against loss), queue
/// depth, jobs, MTU, data digest, impairments (the loss only by block
/// size).
type PanelKey = (u32, u16, u16, usize, bool, [u64; 3]);

impl Axis {
    fn x(self, p: &Point) -> f64 {
        match self {
            Axis::BlockSize => f64::from(p.setting.bs),
            Axis::Loss => p.setting.impair.loss,
        }
    }

    fn label(self, x: f64) -> String {
        match self {
            Axis::BlockSize => size_label(x as u32),
            Axis::Loss => percent_label(x),
        }
    }

    fn name(self) -> &'static str {
        match self {
            Axis::BlockSize => "block size",
            Axis::Loss => "frames lost, each way",
        }
    }

    fn title(self) -> &'static str {
        match self {
            Axis::BlockSize => "by block size",
            Axis::Loss => "against loss",
        }
    }

    /// The panel of `p`: where it goes among the others, and its title
    /// ("qd 32, MTU 9000, data digest on"; impairments only if any).
    fn panel(self, p: &Point) -> (PanelKey, String) {
        let s = &p.setting;
        let i = &s.impair;
        let (bs, loss) = match self {
            Axis::BlockSize => (0, i.loss),
            Axis::Loss => (s.bs, 0.0),
        };
        let key =
            (bs, s.qd, s.jobs, s.mtu, s.ddgst, [loss, i.reorder, i.duplicate].map(f64::to_bits));
        let mut title = format!(
            "qd {}, MTU {}, data digest {}",
            s.qd,
            s.mtu,
            if s.ddgst { "on" } else { "off" }
        );
        if bs > 0 {
            title = format!("{}, {title}", size_label(bs));
        }
        if s.jobs > 1 {
            title += &format!(", {} jobs", s.jobs);
        }
        for (what, chance) in [("loss", loss), ("reorder", i.reorder), ("duplicate", i.duplicate)] {
            if chance > 0.0 {
                title += &format!(", {what} {}", percent_label(chance));
            }
        }
        (key, title)
    }
}

/// The points of one direction, laid out: x values, lines, panels.
struct Figure<'a> {
    rw: Rw,
    axis: Axis,
    /// The values along x, ascending.
    xs: Vec<f64>,
    /// Several transports: lines are named by transport and offload set.
    transports: bool,
    /// Line names, in the order they first appear; a line's color is its index.
    lines: Vec<String>,
    /// A title ("qd 32, MTU 9000, data digest on") and its points each.
    panels: Vec<(String, Vec<&'a Point>)>,
}

impl<'a> Figure<'a> {
    fn new(points: &'a [Point], rw: Rw, axis: Axis) -> Self {
        let of_rw: Vec<&Point> = points.iter().filter(|p| p.setting.rw == rw).collect();
        let mut xs: Vec<f64> = of_rw.iter().map(|p| axis.x(p)).collect();
        xs.sort_by(f64::total_cmp);
        xs.dedup();
        let transports = of_rw.iter().any(|p| p.setting.transport != of_rw[0].setting.transport);
        let mut lines: Vec<String> = Vec::new();
        let mut panels: Vec<(PanelKey, String)> = Vec::new();
        for p in &of_rw {
            let name = line_of(p, transports);
            if !lines.contains(&name) {
                lines.push(name);
            }
            panels.push(axis.panel(p));
        }
        panels.sort_by_key(|a| a.0);
        panels.dedup();
        let panels = panels
            .into_iter()
            .map(|(key, title)| {
                let pts = of_rw.iter().copied().filter(|p| axis.panel(p).0 == key);
                (title, pts.collect())
            })
            .collect();
        Self { rw, axis, xs, transports, lines, panels }
    }

    /// The lines of measure `m`: one per transport and offload set, and
    /// raw TCP's if `m` has it and it was measured.
    fn lines(&self, m: &Measure) -> Vec<String> {
        let mut lines = self.lines.clone();
        let measured =
            |(value, _): Of| self.panels.iter().flat_map(|p| &p.1).any(|p| value(p) > 0.0);
        if m.raw.is_some_and(measured) {
            lines.push(RAW_TCP.into());
        }
        lines
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

    fn size(&self, m: &Measure) -> (u32, u32) {
        let (w, h) = self.panels_size();
        (w, 40 + self.legend_rows(&self.lines(m)) * LEGEND_ROW + h)
    }

    /// Legend entries placed left to right, wrapping: (row, x) of each.
    fn legend(&self, lines: &[String]) -> Vec<(u32, u32)> {
        let width = self.panels_size().0;
        let (mut row, mut x) = (0, 16);
        lines
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

    fn legend_rows(&self, lines: &[String]) -> u32 {
        self.legend(lines).last().map_or(0, |&(row, _)| row + 1)
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
        let title = format!("{}: {} {}", self.rw.name(), m.title, self.axis.title());
        let root = root.titled(&title, ("sans-serif", 22)).map_err(err)?;
        let lines = self.lines(m);
        let (top, grid) = root.split_vertically(self.legend_rows(&lines) * LEGEND_ROW + 8);
        for ((name, (row, x)), color) in
            lines.iter().zip(self.legend(&lines)).zip(COLORS.iter().cycle())
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
            self.draw_panel(&area, panel, points, m, &lines).map_err(err)?;
        }
        root.present().map_err(err)
    }

    /// The points of line `name` in a panel: (x index, median, range).
    fn series(&self, name: &str, points: &[&Point], m: &Measure) -> Vec<(i32, f64, [f64; 2])> {
        let at = |p: &Point| self.xs.iter().position(|&x| x == self.axis.x(p)).map(|i| i as i32);
        let mut pts: Vec<(i32, f64, [f64; 2])> = match (name, m.raw) {
            // Raw TCP's is the same for every point at one x: the first's.
            (RAW_TCP, Some((value, range))) => {
                let mut v: Vec<(i32, f64, [f64; 2])> = Vec::new();
                for p in points {
                    if let Some(i) = at(p).filter(|i| v.iter().all(|s| s.0 != *i)) {
                        v.push((i, value(p), range(p)));
                    }
                }
                v
            }
            _ => points
                .iter()
                .filter(|p| line_of(p, self.transports) == name)
                .filter_map(|p| Some((at(p)?, (m.value)(p), (m.range)(p))))
                .collect(),
        };
        pts.sort_by_key(|&(i, ..)| i);
        pts
    }

    fn draw_panel<DB: DrawingBackend>(
        &self,
        area: &DrawingArea<DB, plotters::coord::Shift>,
        title: &str,
        points: &[&Point],
        m: &Measure,
        lines: &[String],
    ) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
        let series: Vec<_> = lines.iter().map(|name| self.series(name, points, m)).collect();
        let values = || series.iter().flatten().flat_map(|&(_, v, [lo, hi])| [v, lo, hi]);
        let top = values().fold(0.0, f64::max);
        let last = self.xs.len().saturating_sub(1) as i32;
        let mut builder = ChartBuilder::on(area);
        builder.caption(title, ("sans-serif", 16)).margin(10);
        builder.x_label_area_size(36).y_label_area_size(64);
        let x = (0..last).into_segmented();
        if m.log {
            // A decade below the least value, so none sits on the axis.
            let least = values().filter(|v| *v > 0.0).fold(f64::INFINITY, f64::min);
            let low = if least.is_finite() { least / 10.0 } else { 1e-3 };
            let y = (low..(top * 2.0).max(low * 10.0)).log_scale();
            let chart = builder.build_cartesian_2d(x, y)?;
            self.fill(chart, &series, m, top)
        } else {
            let chart = builder.build_cartesian_2d(x, 0.0..(top * 1.1).max(1e-9))?;
            self.fill(chart, &series, m, top)
        }
    }

    /// Draw the mesh and the lines of a panel on its chart, whatever its y
    /// scale.
    fn fill<DB: DrawingBackend, Y: Ranged<ValueType = f64> + ValueFormatter<f64>>(
        &self,
        mut chart: ChartContext<'_, DB, Cartesian2d<SegmentedCoord<RangedCoordi32>, Y>>,
        series: &[Vec<(i32, f64, [f64; 2])>],
        m: &Measure,
        top: f64,
    ) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
        let (xs, axis) = (&self.xs, self.axis);
        chart
            .configure_mesh()
            .disable_x_mesh()
            .light_line_style(WHITE)
            .x_desc(axis.name())
            .y_desc(m.unit)
            .y_label_formatter(&|v| match top {
                t if t >= 10.0 => format!("{v:.0}"),
                _ => format!("{v:.2}"),
            })
            .x_labels(xs.len())
            .x_label_formatter(&|x| match x {
                SegmentValue::CenterOf(i) => {
                    xs.get(*i as usize).map(|&x| axis.label(x)).unwrap_or_default()
                }
                _ => String::new(),
            })
            .draw()?;
        for (pts, color) in series.iter().zip(COLORS.iter().cycle()) {
            let at = |i: i32| SegmentValue::CenterOf(i);
            let line = pts.iter().map(|&(i, v, _)| (at(i), v));
            chart.draw_series(LineSeries::new(line, color.stroke_width(2)))?;
            chart.draw_series(pts.iter().map(|&(i, v, [lo, hi])| {
                ErrorBar::new_vertical(at(i), lo, v, hi, color.stroke_width(1), 10)
            }))?;
            chart.draw_series(
                pts.iter().map(|&(i, v, _)| Circle::new((at(i), v), 4, color.filled())),
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

/// A chance as a percentage: 0.005 is "0.5%", 0.01 is "1%".
fn percent_label(p: f64) -> String {
    let s = format!("{:.4}", p * 100.0);
    format!("{}%", s.trim_end_matches('0').trim_end_matches('.'))
}

/// Make `dir` and check that files can be written in it, before anything
/// is measured for it.
pub fn prepare(dir: &Path) -> Result<(), PlotError> {
    let fail = |error| PlotError::CreateDir { path: dir.into(), error };
    std::fs::create_dir_all(dir).map_err(fail)?;
    let probe = dir.join(format!(".nvme-ddp-{}", std::process::id()));
    std::fs::write(&probe, b"").map_err(fail)?;
    std::fs::remove_file(&probe).map_err(fail)
}

/// Write the charts into `dir`; returns the files written. By block size
/// `{rw}-{measure}`; against loss, when the points have more than one
/// loss rate, `{rw}-loss-{measure}`.
pub fn charts(points: &[Point], dir: &Path) -> Result<Vec<PathBuf>, PlotError> {
    prepare(dir)?;
    let png = font();
    let mut written = Vec::new();
    let mut rws: Vec<Rw> = Vec::new();
    for p in points {
        if !rws.contains(&p.setting.rw) {
            rws.push(p.setting.rw);
        }
    }
    rws.sort_unstable_by_key(|rw| rw.name());
    let (by_bs, by_loss): (&[Measure], &[Measure]) =
        match points.iter().any(|p| p.meter == Meter::Instructions) {
            true => (&COUNTED, &LOSS_COUNTED),
            false => (&MEASURES, &LOSS_MEASURES),
        };
    for rw in rws {
        let mut figures = vec![(Figure::new(points, rw, Axis::BlockSize), "", by_bs)];
        let loss = Figure::new(points, rw, Axis::Loss);
        if loss.xs.len() > 1 {
            figures.push((loss, "loss-", by_loss));
        }
        for (fig, prefix, measures) in &figures {
            for m in *measures {
                let size = fig.size(m);
                let name = format!("{}-{prefix}{}", rw.name(), m.file);
                let svg = dir.join(format!("{name}.svg"));
                fig.draw(SVGBackend::new(&svg, size).into_drawing_area(), m)?;
                written.push(svg);
                if png {
                    let file = dir.join(format!("{name}.png"));
                    fig.draw(BitMapBackend::new(&file, size).into_drawing_area(), m)?;
                    written.push(file);
                }
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
        let fig = Figure::new(&points, Rw::Read, Axis::BlockSize);
        let mut svg = String::new();
        let root = SVGBackend::with_string(&mut svg, fig.size(&MEASURES[1])).into_drawing_area();
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

    #[test]
    fn a_panel_per_job_count() {
        let mut points = Vec::new();
        for jobs in [1, 2] {
            for bs in [4096, 131072] {
                let p = point(32, bs, Caps::ALL, 10e3 * f64::from(jobs));
                points.push(Point { setting: Setting { jobs, ..p.setting }, ..p });
            }
        }
        let fig = Figure::new(&points, Rw::Read, Axis::BlockSize);
        let titles: Vec<&str> = fig.panels.iter().map(|(t, _)| t.as_str()).collect();
        assert_eq!(
            titles,
            ["qd 32, MTU 9000, data digest on", "qd 32, MTU 9000, data digest on, 2 jobs"]
        );
    }

    #[test]
    fn against_loss_a_line_per_offload_set_and_raw_tcp_with_error_bars() {
        // Text is measured with the font, whichever test registers it first.
        assert!(font(), "a TrueType font (fonts-dejavu-core)");
        let mut points = Vec::new();
        for loss in [0.0, 0.005, 0.01] {
            for offload in [Caps::NONE, Caps::ALL] {
                let mut p = point(4, 131072, offload, 1e3);
                p.setting.impair.loss = loss;
                p.median.bytes_per_sec = 1e8;
                p.bytes_per_sec_range = [0.9e8, 1.1e8];
                p.raw_tcp_bytes_per_sec = 2e8;
                p.raw_tcp_bytes_per_sec_range = [1.8e8, 2.2e8];
                points.push(p);
            }
        }
        let fig = Figure::new(&points, Rw::Read, Axis::Loss);
        assert_eq!(fig.xs, [0.0, 0.005, 0.01]);
        let mut svg = String::new();
        let root =
            SVGBackend::with_string(&mut svg, fig.size(&LOSS_MEASURES[0])).into_drawing_area();
        fig.draw(root, &LOSS_MEASURES[0]).unwrap();
        for title in ["read: throughput against loss", "128k, qd 4, MTU 9000, data digest on"] {
            assert_eq!(svg.matches(title).count(), 1, "{title}");
        }
        for label in ["\n0%\n", "\n0.5%\n", "\n1%\n", "\nraw TCP\n", "\nnone\n", "\nall\n"] {
            assert_eq!(svg.matches(label).count(), 1, "{label:?}");
        }
        // Each line's three points with their ranges; raw TCP's once per loss.
        for color in ["#FF0000", "#0000FF", "#00FF00"] {
            let bars = svg.matches(&format!("<line opacity=\"1\" stroke=\"{color}\"")).count();
            assert_eq!(bars, 3 * 3, "{color}");
        }
        // No raw TCP on the other measures.
        let mut svg = String::new();
        let root =
            SVGBackend::with_string(&mut svg, fig.size(&LOSS_MEASURES[3])).into_drawing_area();
        fig.draw(root, &LOSS_MEASURES[3]).unwrap();
        assert!(!svg.contains("raw TCP") && svg.contains("NIC placed"), "{svg}");
        // By block size, a panel per loss rate.
        let fig = Figure::new(&points, Rw::Read, Axis::BlockSize);
        let titles: Vec<&str> = fig.panels.iter().map(|(t, _)| t.as_str()).collect();
        assert_eq!(
            titles,
            [
                "qd 4, MTU 9000, data digest on",
                "qd 4, MTU 9000, data digest on, loss 0.5%",
                "qd 4, MTU 9000, data digest on, loss 1%"
            ]
        );
    }
}
