//! Bench charts in the manner of the classic "IOPS and CPU by block size,
//! with and without RDMA" figures: for each direction, throughput, IOPS and
//! host CPU per I/O against block size, one line per transport and offload
//! set, as SVG and PNG.

use crate::bench::Point;
use plotters::prelude::*;
use std::path::{Path, PathBuf};
use std::sync::Once;

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

/// The points of one chart: a direction at its headline settings (deepest
/// queue, largest MTU, data digest on if measured).
fn headline<'a>(points: &'a [Point], rw: &str) -> Vec<&'a Point> {
    let of_rw: Vec<&Point> = points.iter().filter(|p| p.rw == rw).collect();
    let qd = of_rw.iter().map(|p| p.qd).max().unwrap_or(0);
    let mtu = of_rw.iter().map(|p| p.mtu).max().unwrap_or(0);
    let ddgst = of_rw.iter().any(|p| p.ddgst);
    of_rw.into_iter().filter(|p| p.qd == qd && p.mtu == mtu && p.ddgst == ddgst).collect()
}

type Series = Vec<(String, Vec<(f64, f64)>)>;

fn series(points: &[&Point], value: fn(&Point) -> f64) -> Series {
    // One line per transport and offload set, in the order they first
    // appear; the transport is named when there are several.
    let transports = points.iter().any(|p| p.transport != points[0].transport);
    let mut lines: Series = Vec::new();
    for p in points {
        let xy = ((p.bs as f64).log2(), value(p));
        let name = match transports {
            true => format!("{} {}", p.transport, p.offload),
            false => p.offload.to_string(),
        };
        match lines.iter_mut().find(|(n, _)| *n == name) {
            Some((_, pts)) => pts.push(xy),
            None => lines.push((name, vec![xy])),
        }
    }
    for (_, pts) in &mut lines {
        pts.sort_by(|a, b| a.0.total_cmp(&b.0));
    }
    lines
}

fn draw<DB: DrawingBackend>(
    root: DrawingArea<DB, plotters::coord::Shift>,
    title: &str,
    y_label: &str,
    data: &Series,
) -> Result<(), String>
where
    DB::ErrorType: 'static,
{
    let err = |e: DrawingAreaErrorKind<DB::ErrorType>| e.to_string();
    root.fill(&WHITE).map_err(err)?;
    let xs = data.iter().flat_map(|(_, v)| v.iter().map(|p| p.0));
    let (x0, x1) = xs.fold((f64::MAX, f64::MIN), |(a, b), x| (a.min(x), b.max(x)));
    let y1 = data.iter().flat_map(|(_, v)| v.iter().map(|p| p.1)).fold(0.0f64, f64::max) * 1.1;
    let (x0, x1) = if x0 <= x1 { (x0 - 0.3, x1 + 0.3) } else { (8.0, 21.0) };
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 22))
        .margin(16)
        .x_label_area_size(44)
        .y_label_area_size(72)
        .build_cartesian_2d(x0..x1, 0.0..y1.max(1.0))
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_desc("block size")
        .y_desc(y_label)
        .x_labels(16)
        .x_label_formatter(&|x| {
            let b = 2f64.powf(x.round()) as u64;
            if b >= 1 << 20 {
                format!("{}M", b >> 20)
            } else if b >= 1 << 10 {
                format!("{}k", b >> 10)
            } else {
                b.to_string()
            }
        })
        .draw()
        .map_err(err)?;
    let colors = [RED, BLUE, GREEN, MAGENTA, CYAN, BLACK];
    for (i, (name, pts)) in data.iter().enumerate() {
        let c = colors[i % colors.len()];
        chart
            .draw_series(LineSeries::new(pts.iter().copied(), c.stroke_width(2)))
            .map_err(err)?
            .label(name.clone())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], c.stroke_width(2)));
        chart.draw_series(pts.iter().map(|&p| Circle::new(p, 4, c.filled()))).map_err(err)?;
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(err)?;
    root.present().map_err(err)?;
    Ok(())
}

/// Write the charts into `dir`; returns the files written.
pub fn charts(points: &[Point], dir: &Path) -> Result<Vec<PathBuf>, String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let png = font();
    let mut written = Vec::new();
    let mut rws: Vec<&str> = points.iter().map(|p| p.rw).collect();
    rws.sort_unstable();
    rws.dedup();
    for rw in rws {
        let pts = headline(points, rw);
        let Some(first) = pts.first() else { continue };
        let setting = format!(
            "qd {}, mtu {}, data digest {}",
            first.qd,
            first.mtu,
            if first.ddgst { "on" } else { "off" }
        );
        type Value = fn(&Point) -> f64;
        let throughput: Value = |p| p.bytes_per_sec / 1e6;
        let iops: Value = |p| p.iops / 1e3;
        let cpu: Value = |p| p.host_cpu_ns_per_io / 1e3;
        let charts = [
            (
                "throughput",
                format!("{rw}: throughput by block size ({setting})"),
                "MB/s",
                throughput,
            ),
            ("iops", format!("{rw}: IOPS by block size ({setting})"), "thousand IOPS", iops),
            ("host-cpu", format!("{rw}: host CPU per I/O ({setting})"), "host CPU us per I/O", cpu),
        ];
        for (name, title, y, value) in charts {
            let data = series(&pts, value);
            let svg = dir.join(format!("{rw}-{name}.svg"));
            draw(SVGBackend::new(&svg, (900, 560)).into_drawing_area(), &title, y, &data)?;
            written.push(svg);
            if png {
                let file = dir.join(format!("{rw}-{name}.png"));
                draw(BitMapBackend::new(&file, (900, 560)).into_drawing_area(), &title, y, &data)?;
                written.push(file);
            }
        }
    }
    Ok(written)
}
