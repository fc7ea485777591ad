//! The host's own deadlines in one table (quinn-proto's `TimerTable`):
//! one slot per kind of timer, so that setting, stopping and finding the
//! next one are the same three lines for all of them. Commands' deadlines
//! are their queues' business ([`Commands::deadline`]), not this table's.
//!
//! [`Commands::deadline`]: super::Commands::deadline

use crate::time::Instant;

/// What the host waits for, apart from commands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Timer {
    /// Read CSTS again (waiting for RDY, or for SHST after CC.SHN).
    CstsPoll,
    /// CSTS must have changed by then (CAP.TO, or the shutdown timeout).
    CstsLimit,
    /// Send the next Keep Alive (KATO / 2 after the last).
    KeepAlive,
    /// Bring-up must finish by then: a transport connect has no command
    /// deadline of its own.
    BringUp,
    /// Try a new association after a lost one.
    Reconnect,
}

impl Timer {
    const COUNT: usize = 5;
}

/// When each [`Timer`] fires, if it is set.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct TimerTable([Option<Instant>; Timer::COUNT]);

impl TimerTable {
    pub fn set(&mut self, timer: Timer, at: Instant) {
        self.0[timer as usize] = Some(at);
    }

    pub fn get(&self, timer: Timer) -> Option<Instant> {
        self.0[timer as usize]
    }

    pub fn stop(&mut self, timer: Timer) {
        self.0[timer as usize] = None;
    }

    pub fn stop_all(&mut self) {
        *self = Self::default();
    }

    /// The earliest timer set.
    pub fn next_timeout(&self) -> Option<Instant> {
        self.0.iter().flatten().min().copied()
    }

    /// Stop `timer` if it is due at `now`; returns whether it was.
    pub fn expire(&mut self, timer: Timer, now: Instant) -> bool {
        let due = self.get(timer).is_some_and(|t| now >= t);
        if due {
            self.stop(timer);
        }
        due
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_next_timeout_is_the_earliest_set() {
        let mut t = TimerTable::default();
        assert_eq!(t.next_timeout(), None);
        t.set(Timer::KeepAlive, Instant::from_millis(30));
        t.set(Timer::CstsPoll, Instant::from_millis(20));
        assert_eq!(t.next_timeout(), Some(Instant::from_millis(20)));
        assert!(t.expire(Timer::CstsPoll, Instant::from_millis(25)));
        assert!(!t.expire(Timer::KeepAlive, Instant::from_millis(25)));
        assert_eq!(t.next_timeout(), Some(Instant::from_millis(30)));
        t.stop_all();
        assert_eq!(t.next_timeout(), None);
    }
}
