//! Why a bench run fails: what users read, for runs in this process and
//! for the instructions meter's children alike.

use crate::bench::options::Setting;
use crate::driver::rawtcp::RawTcpError;
use crate::driver::smoltcp::RunError;
use crate::driver::valgrind::Part;
use nvme_of::controller::ConfigError;
use std::time::Duration;

/// Why a bench run failed. The texts are what users see.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// Making the namespace or a NIC, or starting the controller's thread.
    #[error(transparent)]
    Io(#[from] std::io::Error),
    #[error(transparent)]
    Target(#[from] ConfigError),
    /// A stack could not listen, or the host's run failed.
    #[error(transparent)]
    Run(#[from] RunError),
    #[error(transparent)]
    RawTcp(#[from] RawTcpError),
    #[error(transparent)]
    Meter(#[from] MeterError),
    /// An interface to run over could not be opened.
    #[error("{name}: {source}")]
    Link { name: String, source: std::io::Error },
    /// The lockstep loop ran past its time limit.
    #[error("gave up after {0:?}")]
    GaveUp(Duration),
    /// The host failed (as the host app reports it).
    #[error("{0}")]
    Host(String),
    #[error("no measurement")]
    NoMeasurement,
    /// Stopped (Ctrl-C) before the run finished.
    #[error("interrupted")]
    Interrupted,
    /// A job stopped because another job of its run failed.
    #[error("another job of the run failed")]
    OtherJob,
    /// A run of this point failed.
    #[error("{setting}: {source}")]
    Point { setting: Setting, source: Box<BenchError> },
}

/// Why the instructions meter cannot run, or what went wrong in a child.
#[derive(Debug, thiserror::Error)]
pub enum MeterError {
    /// What is missing, and the one line that installs it.
    #[error("--meter instructions needs {0}")]
    Missing(&'static str),
    #[error("--meter instructions counts one job in lockstep on the in-process wire: drop {0}")]
    Unsupported(&'static str),
    #[error("counting the {part} under Valgrind: {why}")]
    Child { part: Part, why: String },
    #[error("the {part}'s run did other work than the host's ({what}): the runs differ")]
    Diverged { part: Part, what: &'static str },
}
