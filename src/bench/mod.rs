//! `nvme-ddp bench`: what do the offloads save?
//!
//! A matrix of workloads (block size, direction, queue depth, data digest,
//! offload set, MTU), each point run `reps` times on fresh stacks over the
//! in-process wire (or a pair of TAP devices). The host, the host's NIC and
//! the controller (with its NIC) run in lockstep on one thread, with the
//! thread's CPU clock read between them, or (`threads`, and always over
//! TAP) on a thread each, with each thread's clock read. Per run: a
//! warm-up, then a measured phase: the host's CPU is what a host with this
//! NIC pays, the NIC's is what hardware would do instead, and the
//! process's CPU time is read too, as a check that the parts account for
//! all of it. Points are reported as medians with their spread. With the
//! instructions meter (`--meter instructions`), each part's cost is what
//! Valgrind counted instead: the same run after run.
//!
//! One job a file:
//! - [`options`]: what to measure, and the matrix of settings it makes.
//! - [`point`]: one point's measures, typed, and one run's.
//! - [`clocks`]: the CPU clocks a run reads, and counters at one moment.
//! - [`meter`]: the instructions meter: each part of a run counted by
//!   Valgrind, in a process of its own.
//! - [`matrix`]: every point `reps` times, in rounds, raw TCP beside.
//! - [`run`]: one run in this process: a point's stacks in lockstep or
//!   on threads, and raw TCP's.
//! - [`error`]: why a run fails, as users read it.
//! - `job`: one job's host app: warm-up, the meeting of jobs, the window.
//! - [`stats`]: medians and spreads, and the limit a spread must keep.
//! - [`goals`]: comparing points against goals the user gives in a file.
//! - [`report`]: the machine and everything a bench run found, as JSON.
//!
//! The bench measures; it must never hold goals of its own (they come from
//! the user's file) nor judge a point that spread too much.

pub mod clocks;
pub mod error;
pub mod goals;
mod job;
pub mod matrix;
pub mod meter;
pub mod options;
pub mod point;
pub mod report;
pub mod run;
pub mod stats;
