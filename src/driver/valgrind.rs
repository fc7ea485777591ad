//! Switching Valgrind's event collection on and off around one part of a
//! lockstep run, so that what Callgrind counts is that part's work inside
//! the measured window (and the few instructions of the client request
//! that switches it off again). The part's step is the boundary, as the
//! CPU clock reads between steps are: no function name decides.
//!
//! It only switches; it must never read what Valgrind counted (that is the
//! bench's, from Callgrind's output file) nor step a part itself.

use std::cell::Cell;
use std::fmt;

/// A part of a lockstep run whose work can be counted on its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Part {
    /// The NVMe host: its stack, binding and queues.
    Host,
    /// The host's software NIC.
    Nic,
    /// The controller, its own NIC included.
    Controller,
    /// Raw TCP's sending stack.
    Sender,
    /// Raw TCP's receiving stack (its NIC not included).
    Receiver,
}

impl Part {
    /// The parts of an NVMe point, and those of raw TCP.
    pub const NVME: [Part; 3] = [Part::Host, Part::Nic, Part::Controller];
    pub const RAW_TCP: [Part; 2] = [Part::Sender, Part::Receiver];

    pub fn name(self) -> &'static str {
        match self {
            Part::Host => "host",
            Part::Nic => "nic",
            Part::Controller => "controller",
            Part::Sender => "sender",
            Part::Receiver => "receiver",
        }
    }

    pub fn parse(s: &str) -> Result<Self, String> {
        [Part::NVME.as_slice(), Part::RAW_TCP.as_slice()]
            .concat()
            .into_iter()
            .find(|p| p.name() == s)
            .ok_or_else(|| format!("{s}: not a part (host, nic, controller, sender, receiver)"))
    }
}

impl fmt::Display for Part {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Whether this build can switch Valgrind's collection (the `valgrind`
/// feature, whose client requests need Valgrind's headers and libclang to
/// build).
pub const CLIENT_REQUESTS: bool = cfg!(feature = "valgrind");

/// Collects the events of one part, while the measured window is open;
/// the run tells it which part is about to run. Callgrind must start with
/// collection off (`--collect-atstart=no`).
#[derive(Debug)]
pub struct Collector {
    part: Part,
    window: Cell<bool>,
    /// Whether Callgrind collects now (it has one switch: toggling).
    on: Cell<bool>,
}

impl Collector {
    pub fn new(part: Part) -> Self {
        Self { part, window: Cell::new(false), on: Cell::new(false) }
    }

    pub fn part(&self) -> Part {
        self.part
    }

    /// `running` is about to run; `None`: the harness itself.
    #[inline]
    pub fn enter(&self, running: Option<Part>) {
        let want = self.window.get() && running == Some(self.part);
        if want != self.on.get() {
            self.on.set(want);
            #[cfg(feature = "valgrind")]
            valgrind_requests::callgrind::toggle_collect();
        }
    }

    /// The measured window opens while `running` runs (`None`: the
    /// harness).
    pub fn open(&self, running: Option<Part>) {
        self.window.set(true);
        self.enter(running);
    }

    /// The measured window closes: nothing is collected after this.
    pub fn close(&self) {
        self.window.set(false);
        self.enter(None);
    }
}

/// `running` is about to run, if a collector counts this run.
#[inline]
pub fn collect(collector: Option<&Collector>, running: Option<Part>) {
    if let Some(c) = collector {
        c.enter(running);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn collects_only_its_part_and_only_inside_the_window() {
        let c = Collector::new(Part::Nic);
        let on = |c: &Collector| c.on.get();
        c.enter(Some(Part::Nic));
        assert!(!on(&c), "before the window");
        c.enter(Some(Part::Host));
        c.open(Some(Part::Host));
        assert!(!on(&c), "the window opened in another part's step");
        c.enter(Some(Part::Nic));
        assert!(on(&c));
        c.enter(Some(Part::Controller));
        assert!(!on(&c));
        c.enter(Some(Part::Nic));
        c.enter(None);
        assert!(!on(&c), "the harness between steps");
        c.enter(Some(Part::Nic));
        c.close();
        assert!(!on(&c));
        c.enter(Some(Part::Nic));
        assert!(!on(&c), "after the window");
        let h = Collector::new(Part::Host);
        h.open(Some(Part::Host));
        assert!(on(&h), "opened inside its own step: from there on");
    }

    #[test]
    fn parts_parse_from_their_names() {
        for p in Part::NVME.into_iter().chain(Part::RAW_TCP) {
            assert_eq!(Part::parse(p.name()), Ok(p));
        }
        assert!(Part::parse("harness").is_err());
    }
}
