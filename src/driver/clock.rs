//! Time for the drivers, in the sans-IO code's units: the wall clock, or
//! (for runs Valgrind counts) time that passes by the turn.
//!
//! It tells the time; it must never sleep or schedule.

/// Microseconds since the clock was made.
#[derive(Debug, Clone, Copy)]
pub struct Clock(std::time::Instant);

impl Default for Clock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock {
    pub fn new() -> Self {
        Self(std::time::Instant::now())
    }

    pub fn now(&self) -> nvme_of::Instant {
        nvme_of::Instant::from_micros(self.0.elapsed().as_micros() as u64)
    }
}

/// Time that passes by the turn of a lockstep loop, not by the clock, so
/// that a run counted by Valgrind sees the same times on every run (and
/// not Valgrind's slowness): each turn takes [`TurnClock::TURN`], a wait
/// for a timer none.
#[derive(Debug, Clone, Copy)]
pub struct TurnClock(nvme_of::Instant);

impl TurnClock {
    /// About what a turn of host, NIC and controller takes natively.
    pub const TURN: std::time::Duration = std::time::Duration::from_micros(5);

    pub fn starting(at: nvme_of::Instant) -> Self {
        Self(at)
    }

    pub fn now(&self) -> nvme_of::Instant {
        self.0
    }

    /// A turn is over.
    pub fn turn(&mut self) {
        self.0 = self.0 + Self::TURN;
    }

    /// Every part waits for a timer at `at`: it is due.
    pub fn wait_until(&mut self, at: nvme_of::Instant) {
        self.0 = self.0.max(at);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn turns_pass_time_and_waits_skip_to_the_timer() {
        let mut t = TurnClock::starting(nvme_of::Instant::from_micros(100));
        t.turn();
        assert_eq!(t.now().as_micros(), 105);
        t.wait_until(nvme_of::Instant::from_micros(1000));
        assert_eq!(t.now().as_micros(), 1000);
        t.wait_until(nvme_of::Instant::from_micros(10));
        assert_eq!(t.now().as_micros(), 1000, "time never goes back");
    }
}
