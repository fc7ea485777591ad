//! Wall-clock time for the drivers, in the sans-IO code's units.
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
