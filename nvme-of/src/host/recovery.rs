//! Recovery, as Linux's nvme-tcp does it: a command that times out is
//! aborted first; a lost association is torn down and made again every
//! `reconnect_delay` until `ctrl_loss_tmo`, with the commands that did not
//! complete submitted again; an error the controller lets us retry (DNR
//! clear) is retried up to `MAX_RETRIES` times; a reset the host asks for
//! (`nvme reset`) goes the same way with no delay.

use super::timer::Timer;
use super::{Command, Host, HostError, HostEvent, MAX_RETRIES, Owner, State, Step};
use crate::nvme::{Cqe, Sqe, Status, admin, property};
use crate::time::Instant;
use std::collections::VecDeque;
use std::time::Duration;
use tracing::{debug, info, warn};

/// How often recovery ran, for users to see.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Recovery {
    /// Associations lost (a loss counts once, however many attempts it
    /// takes to make a new one).
    pub lost: u64,
    /// Attempts to make a new association after a loss, those that
    /// failed included.
    pub attempts: u64,
    /// New associations made after one was lost.
    pub reconnects: u64,
    /// Commands submitted again: after a lost association, or after an
    /// error the controller allowed to be retried (DNR clear).
    pub retried: u64,
    /// Abort commands sent for commands that timed out.
    pub aborts: u64,
}

/// A command to submit again.
#[derive(Debug)]
pub(super) struct Retry {
    qid: u16,
    tag: u64,
    cmd: Command,
    tries: u8,
}

impl Host {
    /// Reset the controller, as `nvme reset` does: the I/O queues go (what
    /// is in flight waits), CC.EN is cleared, the admin queue goes, and a
    /// new association is made at once; the waiting commands are then
    /// submitted again. Returns false unless the host is ready.
    pub fn reset_controller(&mut self, now: Instant) -> bool {
        self.now = self.now.max(now);
        if self.state != State::Ready {
            return false;
        }
        info!(parent: &self.span, "resetting the controller");
        self.timers.stop(Timer::KeepAlive);
        for qid in 1..self.queues.len() as u16 {
            self.stop_queue(qid);
        }
        self.state = State::Disabling;
        self.property_set(Step::Disable, property::CC, self.cc & !property::CC_EN, now);
        true
    }

    /// Command `cid` on queue `qid` did not complete in time. An I/O is
    /// aborted first and given another command timeout; anything else,
    /// or an I/O already aborted, resets the association.
    pub(super) fn timed_out(&mut self, qid: u16, cid: u16, owner: Owner, now: Instant) {
        // A set has no admin queue to abort on: its trouble goes to the
        // association's host.
        let abortable = qid > 0
            && !self.set
            && matches!(owner, Owner::Io(_))
            && self.state == State::Ready
            && !self.aborted.contains(&(qid, cid));
        if !abortable {
            warn!(parent: &self.span, qid, cid, ?owner, "command timed out");
            return self.fail(HostError::Timeout(match owner {
                Owner::KeepAlive => "a keep alive",
                _ => "a command completion",
            }));
        }
        warn!(parent: &self.span, qid, cid, "command timed out, aborting it");
        self.aborted.push((qid, cid));
        self.recovery.aborts += 1;
        let mut sqe = Sqe::new(admin::ABORT, 0, Default::default());
        sqe.cdw10 = u32::from(qid) | u32::from(cid) << 16;
        self.admin_cmd(Owner::Abort, sqe, None, now);
        self.queues[usize::from(qid)].commands_mut().extend(cid, now + self.cfg.command_timeout);
    }

    /// I/O `tag` completed on queue `qid`. An error the controller lets us
    /// retry (DNR clear) is submitted again, up to [`MAX_RETRIES`] times,
    /// as Linux does.
    pub(super) fn completed(
        &mut self,
        qid: u16,
        tag: u64,
        cmd: Command,
        status: Status,
        cqe: Cqe,
        now: Instant,
    ) {
        self.aborted.retain(|&(q, c)| (q, c) != (qid, cqe.cid));
        let tries =
            if self.tries.is_empty() { 0 } else { self.tries.remove(&(qid, tag)).unwrap_or(0) };
        let retry = qid > 0 && !status.is_success() && !status.is_dnr() && tries < MAX_RETRIES;
        if retry && self.state == State::Ready {
            debug!(parent: &self.span, qid, %status, tries, "retrying a failed command");
            self.retry.push_back(Retry { qid, tag, cmd, tries: tries + 1 });
        } else {
            self.events.push_back(HostEvent::Completion { qid, tag, status, buf: cmd.buf() });
        }
        if !self.retry.is_empty() && self.state == State::Ready {
            self.resubmit(now);
        }
    }

    /// Submit waiting retries while their queues have room.
    pub(super) fn resubmit(&mut self, now: Instant) {
        let qids = self.io_qids();
        while let Some(r) = self.retry.pop_front() {
            // The new association may have fewer I/O queues.
            let qid = match r.qid {
                0 => 0,
                _ if qids.is_empty() => 0,
                q if qids.contains(&q) => q,
                q => qids[usize::from(q - 1) % qids.len()],
            };
            let Command { owner, sqe, data } = r.cmd;
            let q = &mut self.queues[usize::from(qid)];
            let deadline = now + self.cfg.command_timeout;
            if q.submit(owner, sqe, data.clone(), deadline).is_none() {
                // Full: the next completion makes room.
                self.retry.push_front(Retry { cmd: Command { owner, sqe, data }, ..r });
                return;
            }
            self.tries.insert((qid, r.tag), r.tries);
            self.recovery.retried += 1;
        }
    }

    /// The association failed. Once it has been up, it is reset and made
    /// again (until ctrl-loss-tmo); a first bring-up fails for good, as a
    /// Linux `nvme connect` does.
    pub(super) fn fail(&mut self, e: HostError) {
        let live_once = match self.state {
            State::Failed | State::Closed | State::Resetting => return,
            State::Ready | State::Disabling => true,
            State::BringUp => self.lost_at.is_some(),
            State::ShuttingDown => false,
        };
        if live_once && self.cfg.ctrl_loss_tmo != Some(Duration::ZERO) && !e.is_final() {
            if self.lost_at.is_none() && self.set {
                // The association's host says so, and counts it.
                debug!(parent: &self.span, error = %e, "a queue set lost its queues");
            } else if self.lost_at.is_none() {
                warn!(parent: &self.span, error = %e, "association lost");
                self.recovery.lost += 1;
            } else {
                debug!(parent: &self.span, error = %e, "reconnect attempt failed");
            }
            self.last_error = Some(e.clone());
            self.begin_reconnect(Some(e), self.cfg.reconnect_delay);
        } else {
            self.give_up(e);
        }
    }

    /// Tear the association down and make a new one after `delay`;
    /// commands that did not complete wait to be submitted again.
    pub(super) fn begin_reconnect(&mut self, error: Option<HostError>, delay: Duration) {
        let now = self.now;
        self.lost_at.get_or_insert(now);
        debug!(parent: &self.span, ?delay, "reconnecting");
        self.stop_queues();
        self.state = State::Resetting;
        // A set waits for the association's host to make a new one.
        if !self.set {
            self.timers.set(Timer::Reconnect, now + delay);
        }
        self.events.push_back(HostEvent::Reconnecting { error, delay });
    }

    /// Stop every queue and forget the association's timers.
    pub(super) fn stop_queues(&mut self) {
        self.timers.stop_all();
        self.connect_pending.clear();
        self.aborted.clear();
        self.auth.clear();
        for qid in 0..self.queues.len() as u16 {
            self.stop_queue(qid);
        }
        self.tries.clear();
        if self.set {
            // A set holds no queue until it adopts the new association's.
            self.lent.extend(0..self.queues.len() as u16);
        }
    }

    /// Abort queue `qid` and close its transport. I/O that did not
    /// complete waits for a new association (past its retries it fails);
    /// the host's own commands are made again by bring-up.
    pub(super) fn stop_queue(&mut self, qid: u16) {
        let q = &mut self.queues[usize::from(qid)];
        let cmds = q.abort_all();
        q.close();
        for (cmd, answered) in cmds {
            let Owner::Io(tag) = cmd.owner else { continue };
            let tries = self.tries.remove(&(qid, tag)).unwrap_or(0);
            if answered.is_none() && qid > 0 && tries < MAX_RETRIES {
                self.retry.push_back(Retry { qid, tag, cmd, tries: tries + 1 });
            } else {
                let status = answered.map_or(Status::HOST_ABORTED, |(s, _)| s);
                let buf = cmd.buf();
                self.events.push_back(HostEvent::Completion { qid, tag, status, buf });
            }
        }
    }

    /// Time to try a new association, unless ctrl-loss-tmo has passed.
    pub(super) fn reconnect(&mut self, now: Instant) {
        let lost = now.saturating_since(self.lost_at.unwrap_or(now));
        if self.cfg.ctrl_loss_tmo.is_some_and(|tmo| lost >= tmo) {
            let last = Box::new(self.last_error.take().unwrap_or(HostError::Timeout("reconnect")));
            return self.give_up(HostError::ControllerLost { after: lost, last });
        }
        info!(parent: &self.span, ?lost, "reconnecting");
        self.recovery.attempts += 1;
        self.connect_pending = VecDeque::from([0]);
        self.cntlid = 0;
        self.io_connected = 0;
        self.namespaces.clear();
        self.ns_pending.clear();
        self.state = State::BringUp;
        self.timers.set(Timer::BringUp, now + self.cfg.command_timeout);
    }

    /// Fail for good: every command not yet completed completes with an
    /// error first.
    pub(super) fn give_up(&mut self, e: HostError) {
        if matches!(self.state, State::Failed | State::Closed) {
            return;
        }
        info!(parent: &self.span, error = %e, "association failed");
        self.stop_queues();
        self.fail_retries();
        self.state = State::Failed;
        self.events.push_back(HostEvent::Failed(e));
    }

    pub(super) fn fail_retries(&mut self) {
        for r in std::mem::take(&mut self.retry) {
            let buf = r.cmd.buf();
            let (qid, tag, status) = (r.qid, r.tag, Status::HOST_PATH_ERROR);
            self.events.push_back(HostEvent::Completion { qid, tag, status, buf });
        }
    }

    /// End the association at once, without the controller's part (no
    /// CC.SHN): the queues close, every command not completed completes
    /// with an error status, and `Closed` follows. For a user's stop,
    /// which must not wait on a controller that may be gone.
    pub fn close(&mut self, now: Instant) {
        self.now = self.now.max(now);
        if !matches!(self.state, State::Failed | State::Closed) {
            self.close_all();
        }
    }

    pub(super) fn close_all(&mut self) {
        self.stop_queues();
        self.fail_retries();
        self.state = State::Closed;
        self.events.push_back(HostEvent::Closed);
    }
}
