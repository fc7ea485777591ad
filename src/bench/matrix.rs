//! The matrix: every point run `reps` times in rounds, raw TCP beside
//! them, each run in this process ([`run`]) or counted by the
//! instructions meter ([`meter`]).

use crate::bench::error::BenchError;
use crate::bench::meter;
use crate::bench::options::{BenchOptions, Impair, Meter, Setting};
use crate::bench::point::{Measures, Point, RawRun, RawTcp};
use crate::bench::run;
use crate::bench::stats::{raw_tcp, summarize};
use std::sync::atomic::AtomicBool;

/// Repetition `rep` of raw TCP on the bench's medium at `mtu` under
/// `impair`: bytes a second (and over interfaces, the in-process wire's
/// beside them), or under the instructions meter, what its ends did per
/// byte. Setting `stop` (Ctrl-C) ends it.
pub fn raw_tcp_run(
    o: &BenchOptions,
    mtu: usize,
    impair: Impair,
    rep: usize,
    stop: &AtomicBool,
) -> Result<RawRun, BenchError> {
    match o.meter == Meter::Instructions && o.collect.is_none() {
        true => meter::raw_run(o, mtu, impair, rep, stop),
        false => run::raw_tcp(o, mtu, impair, rep, stop),
    }
}

/// What a matrix measured: a point per setting run at least once, over
/// the runs it got; the rounds run whole; and what ended it early, if
/// anything did.
pub struct Matrix {
    pub points: Vec<Point>,
    pub rounds: usize,
    pub failed: Option<BenchError>,
}

/// What [`rounds`] is about to do, or has done.
pub enum Next<'a> {
    Raw {
        mtu: usize,
        impair: Impair,
    },
    Point {
        setting: &'a Setting,
        rep: usize,
    },
    /// A point's run is done.
    Done,
}

/// Run the matrix of `points` in `reps` rounds: each round runs every
/// point once (`run(point, rep)`), and, when `raw`, raw TCP once on each
/// MTU and impairment (`run_raw(mtu, impair, rep)`) before the first point
/// that needs it. So the points a ratio compares are measured side by
/// side, not minutes apart on a machine whose speed drifts. An
/// interruption or a failure ends the matrix: every run made still
/// counts, and a point with fewer runs than `reps` is not steady, so no
/// verdict rests on it. `tell` hears of every step.
pub fn rounds<'a>(
    points: &'a [Setting],
    reps: usize,
    raw: bool,
    mut run: impl FnMut(&Setting, usize) -> Result<Measures, BenchError>,
    mut run_raw: impl FnMut(usize, Impair, usize) -> Result<RawRun, BenchError>,
    mut tell: impl FnMut(Next<'a>),
) -> Matrix {
    let mut runs: Vec<Vec<Measures>> = points.iter().map(|_| Vec::new()).collect();
    let mut ceilings: Vec<((usize, Impair), Vec<RawRun>)> = Vec::new();
    let mut failed = None;
    let mut whole = 0;
    'rounds: for rep in 0..reps {
        for (p, runs) in points.iter().zip(&mut runs) {
            let at = (p.mtu, p.impair);
            let i = match ceilings.iter().position(|(k, _)| *k == at) {
                Some(i) => i,
                None => {
                    ceilings.push((at, Vec::new()));
                    ceilings.len() - 1
                }
            };
            if raw && ceilings[i].1.len() == rep {
                tell(Next::Raw { mtu: p.mtu, impair: p.impair });
                match run_raw(p.mtu, p.impair, rep) {
                    Ok(v) => ceilings[i].1.push(v),
                    Err(e) => {
                        failed = Some(e);
                        break 'rounds;
                    }
                }
            }
            tell(Next::Point { setting: p, rep });
            match run(p, rep) {
                Ok(m) => runs.push(m),
                Err(e) => {
                    failed = Some(e);
                    break 'rounds;
                }
            }
            tell(Next::Done);
        }
        whole += 1;
    }
    let ceiling = |p: &Setting| match ceilings.iter().find(|(k, _)| *k == (p.mtu, p.impair)) {
        Some((_, v)) if !v.is_empty() => raw_tcp(v),
        _ => RawTcp::default(),
    };
    let points = points
        .iter()
        .zip(&runs)
        .filter(|(_, r)| !r.is_empty())
        .map(|(p, r)| {
            let mut point = summarize(*p, r, ceiling(p));
            point.steady &= r.len() >= reps;
            point
        })
        .collect();
    let failed = failed.filter(|e| !matches!(e, BenchError::Interrupted));
    Matrix { points, rounds: whole, failed }
}

/// Run one point `reps` times, repetition `r`'s impairments seeded with
/// [`rep_seed`](crate::bench::options::rep_seed)`(o.seed, r)`; `tick` is
/// called after each run. Setting `stop` (Ctrl-C) ends it with
/// [`BenchError::Interrupted`].
pub fn run_point(
    p: &Setting,
    o: &BenchOptions,
    raw: RawTcp,
    stop: &AtomicBool,
    mut tick: impl FnMut(),
) -> Result<Point, BenchError> {
    let mut samples = Vec::new();
    for rep in 0..o.reps.max(1) {
        samples.push(run_rep(p, o, rep, stop)?);
        tick();
    }
    Ok(summarize(*p, &samples, raw))
}

/// Repetition `rep` of point `p` on fresh stacks, its impairments seeded
/// with [`rep_seed`](crate::bench::options::rep_seed)`(o.seed, rep)`: in
/// this process, or under the instructions meter, each part counted in a
/// process of its own.
pub fn run_rep(
    p: &Setting,
    o: &BenchOptions,
    rep: usize,
    stop: &AtomicBool,
) -> Result<Measures, BenchError> {
    match o.meter == Meter::Instructions && o.collect.is_none() {
        true => meter::run_rep(p, o, rep, stop),
        false => run::run_rep(p, o, rep, stop),
    }
    .map_err(|e| match e {
        BenchError::Interrupted => e,
        e => BenchError::Point { setting: *p, source: Box::new(e) },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::driver::transport::TransportType;
    use crate::workload::Rw;

    /// Two points at MTU 9000 and one at 1500.
    fn matrix() -> Vec<Setting> {
        let o = BenchOptions {
            bs: vec![128 << 10],
            rw: vec![Rw::Write],
            qd: vec![32],
            mtu: vec![9000, 1500],
            transport: vec![TransportType::Tcp],
            ..BenchOptions::default()
        };
        let mut v = o.settings().into_iter();
        let mut at = |mtu| v.by_ref().find(|p| p.mtu == mtu).unwrap();
        vec![at(9000), at(9000), at(1500)]
    }

    /// What ran, in order: `R<mtu>.<rep>` raw TCP, `P<point>.<rep>` a point.
    fn record(points: &[Setting], reps: usize, fail: Option<&str>) -> (Vec<String>, Matrix) {
        let log = std::cell::RefCell::new(Vec::new());
        let step = |s: String| {
            log.borrow_mut().push(s.clone());
            match fail == Some(&s) {
                true => Err(BenchError::Interrupted),
                false => Ok(()),
            }
        };
        let index = |p: &Setting| points.iter().position(|q| std::ptr::eq(q, p)).unwrap();
        let m = rounds(
            points,
            reps,
            true,
            |p, rep| step(format!("P{}.{rep}", index(p))).map(|()| Measures::default()),
            |mtu, _, rep| {
                let bytes_per_sec = 1e9 * (rep + 1) as f64;
                step(format!("R{mtu}.{rep}"))
                    .map(|()| RawRun { bytes_per_sec, ..RawRun::default() })
            },
            |_| {},
        );
        (log.into_inner(), m)
    }

    #[test]
    fn every_round_runs_every_point_and_raw_tcp_once_before_the_next_round() {
        let points = matrix();
        let (log, m) = record(&points, 3, None);
        let round = |r| {
            [format!("R9000.{r}"), format!("P0.{r}"), format!("P1.{r}")]
                .into_iter()
                .chain([format!("R1500.{r}"), format!("P2.{r}")])
        };
        assert_eq!(log, (0..3).flat_map(round).collect::<Vec<_>>());
        assert_eq!((m.points.len(), m.rounds), (3, 3));
        assert!(m.points.iter().all(|p| p.reps == 3 && p.steady));
        // Raw TCP's median over the three rounds: 2e9.
        assert_eq!(m.points[2].raw_tcp_bytes_per_sec, 2e9);
    }

    #[test]
    fn a_matrix_cut_short_keeps_every_run_and_rests_no_verdict_on_them() {
        let points = matrix();
        let (log, m) = record(&points, 3, Some("P2.1"));
        assert_eq!(log.last().map(String::as_str), Some("P2.1"));
        assert_eq!(m.rounds, 1);
        let reps: Vec<usize> = m.points.iter().map(|p| p.reps).collect();
        assert_eq!(reps, [2, 2, 1]);
        assert!(m.points.iter().all(|p| !p.steady), "fewer runs than asked");
        // Raw TCP's median over the runs it got: 1e9 and 2e9.
        assert_eq!(m.points[0].raw_tcp_bytes_per_sec, 1.5e9);
        assert!(m.failed.is_none(), "an interruption is no failure");
        // Cut in the first round: the points before still count.
        let (_, m) = record(&points, 3, Some("R1500.0"));
        assert_eq!((m.rounds, m.points.len()), (0, 2));
    }
}
