//! Queue sets: an association's I/O queues lent to hosts of their own (one
//! per thread in a driver), on the pair harness. Each set runs I/O on its
//! queues alone; a queue a set loses resets the whole association through
//! the association's host, and the sets take the new association's queues
//! and submit again what did not complete; a failure for good ends them.

use nvme_of::controller::TargetConfig;
use nvme_of::host::{HostConfig, HostError, HostEvent, Io, IoKind, SubmitError};
use nvme_of::nvme::Status;
use nvme_of::pair::{self, Loopback, Pair, SUBNQN, pattern};
use nvme_storage::RamNamespace;
use std::sync::Arc;
use std::time::Duration;
use ulp_ddp::IoBuf;

fn nvm(host: HostConfig) -> Pair {
    let ns = Arc::new(RamNamespace::new(16 << 20, 512).unwrap());
    let target = pair::target(TargetConfig::default(), ns);
    Pair::with(HostConfig { subnqn: SUBNQN.into(), io_queues: 4, ..host }, Loopback, target)
}

fn write(tag: u64, seed: u64) -> (Io, Vec<u8>) {
    let data = pattern(4096, seed);
    let io = Io {
        kind: IoKind::Write,
        nsid: 1,
        slba: tag * 8,
        nlb: 8,
        buf: Some(IoBuf::from_vec(data.clone())),
        tag,
    };
    (io, data)
}

/// Run the pair until `done` holds of it, time jumping to each deadline.
fn settle(p: &mut Pair, done: impl Fn(&Pair) -> bool) {
    for _ in 0..100_000 {
        while p.step() {}
        if done(p) {
            return;
        }
        let Some(t) = p.next_deadline() else { break };
        p.now = p.now.max(t);
        p.fire_timers();
    }
    panic!("did not settle: {:?} {:?}", p.events, p.sets.iter().map(|s| &s.1).collect::<Vec<_>>());
}

/// Every set has seen completions of `n` I/Os in all.
fn completed(n: usize) -> impl Fn(&Pair) -> bool {
    move |p| p.sets.iter().map(|(_, ev)| completions(ev).len()).sum::<usize>() >= n
}

/// Read the blocks `written` holds (block `i` at LBA `8 i`) through set
/// `set`'s queue `qid`, one after another, and compare.
fn read_back(p: &mut Pair, (set, qid): (usize, u16), written: &[Vec<u8>]) {
    for (tag, data) in written.iter().enumerate() {
        let buf = IoBuf::new(4096);
        let slba = tag as u64 * 8;
        let read =
            Io { kind: IoKind::Read, nsid: 1, slba, nlb: 8, buf: Some(buf.clone()), tag: 99 };
        let before = completions(&p.sets[set].1).len();
        let now = p.now;
        p.sets[set].0.submit(qid, read, now).unwrap();
        settle(p, |p| completions(&p.sets[set].1).len() > before);
        assert_eq!(&buf.to_vec(), data, "LBA {slba}");
    }
}

fn completions(events: &[HostEvent]) -> Vec<(u64, Status)> {
    events
        .iter()
        .filter_map(|e| match e {
            HostEvent::Completion { tag, status, .. } => Some((*tag, *status)),
            _ => None,
        })
        .collect()
}

#[test]
fn sets_run_io_on_the_queues_they_were_lent_and_no_others() {
    let mut p = nvm(HostConfig::default());
    p.ready();
    let a = p.lend(&[1, 2]);
    let b = p.lend(&[3, 4]);
    assert!(p.host.lend(&[2]).is_none(), "a queue is lent once");
    p.run_for(Duration::from_millis(1));
    for (set, events) in &p.sets {
        assert!(matches!(events[..], [HostEvent::Ready]), "{events:?}");
        assert!(set.is_set() && set.is_ready());
    }
    assert_eq!(p.sets[a].0.io_qids(), [1, 2]);
    assert_eq!(p.sets[b].0.io_qids(), [3, 4]);
    assert_eq!(p.host.io_qids(), [] as [u16; 0], "the association's host keeps none");
    assert!(p.sets[a].0.queue_depth() > 1, "the depth of the queues it holds");
    let now = p.now;
    // Each set submits on its own queues only; the host on none of them.
    let (io, _) = write(9, 9);
    assert_eq!(p.host.submit(1, io, now), Err(SubmitError::NotReady));
    let (io, _) = write(9, 9);
    assert_eq!(p.sets[a].0.submit(3, io, now), Err(SubmitError::NotReady));
    let mut written = Vec::new();
    for (tag, set, qid) in [(0, a, 1), (1, a, 2), (2, b, 3), (3, b, 4)] {
        let (io, data) = write(tag, tag + 100);
        p.sets[set].0.submit(qid, io, now).unwrap();
        written.push(data);
    }
    settle(&mut p, completed(4));
    assert_eq!(completions(&p.sets[a].1), [(0, Status::SUCCESS), (1, Status::SUCCESS)]);
    assert_eq!(completions(&p.sets[b].1), [(2, Status::SUCCESS), (3, Status::SUCCESS)]);
    assert!(completions(&p.events).is_empty(), "no I/O completes on the host");
    // What one set wrote, the other reads back.
    read_back(&mut p, (b, 3), &written);
}

/// A queue lost in one set resets the association: the set reports the
/// loss, the association's host (told of it) makes a new association, each
/// set takes its new queues and submits again what did not complete, and
/// every write completes exactly once and reads back.
#[test]
fn a_queue_lost_in_a_set_resets_the_association_and_the_sets_carry_on() {
    let delay = Duration::from_millis(100);
    let mut p = nvm(HostConfig { reconnect_delay: delay, ..Default::default() });
    p.ready();
    p.lend(&[1, 2]);
    p.lend(&[3, 4]);
    let now = p.now;
    let mut written = Vec::new();
    for tag in 0..8u64 {
        let (io, data) = write(tag, tag + 7);
        let (set, qid) = if tag % 2 == 0 { (0, 1 + (tag % 4 == 0) as u16) } else { (1, 3) };
        p.sets[set].0.submit(qid, io, now).unwrap();
        written.push(data);
    }
    p.cut(1);
    // The driver's part: a set's loss goes to the association's host, the
    // host's to every set, and the new association's queues to the sets.
    let mut told = [0usize; 2];
    let mut host_told = 0;
    for _ in 0..100 {
        while p.step() {}
        let mut lost = Vec::new();
        for (i, (set, events)) in p.sets.iter().enumerate() {
            for e in &events[told[i]..] {
                if let HostEvent::Reconnecting { error: Some(e), .. } = e {
                    lost.push((e.clone(), set.association()));
                }
            }
            told[i] = events.len();
        }
        let now = p.now;
        for (e, which) in lost {
            p.host.fail_association(e, which, now);
        }
        let which = p.host.association();
        for e in &p.events[host_told..] {
            if let HostEvent::Reconnecting { error: Some(e), .. } = e {
                for (set, _) in &mut p.sets {
                    set.fail_association(e.clone(), which, now);
                }
            }
        }
        host_told = p.events.len();
        while p.step() {}
        if p.events.iter().any(|e| matches!(e, HostEvent::Reconnected)) {
            break;
        }
        if let Some(t) = p.next_deadline() {
            p.now = p.now.max(t);
            p.fire_timers();
        }
    }
    assert!(p.events.iter().any(|e| matches!(e, HostEvent::Reconnected)), "{:?}", p.events);
    for (i, qids) in [[1, 2], [3, 4]].iter().enumerate() {
        let new = p.host.lend(qids).unwrap();
        let now = p.now;
        p.sets[i].0.adopt(new, now);
    }
    settle(&mut p, completed(8));
    let mut done: Vec<(u64, Status)> = p.sets.iter().flat_map(|(_, ev)| completions(ev)).collect();
    done.sort_by_key(|&(tag, _)| tag);
    let all: Vec<(u64, Status)> = (0..8).map(|t| (t, Status::SUCCESS)).collect();
    assert_eq!(done, all, "each write once");
    for (_, events) in &p.sets {
        assert!(events.iter().any(|e| matches!(e, HostEvent::Reconnected)), "{events:?}");
    }
    let r = p.host.recovery();
    assert_eq!((r.lost, r.reconnects), (1, 1), "the association's host counts the loss");
    let retried: u64 = p.sets.iter().map(|(s, _)| s.recovery().retried).sum();
    assert!(retried > 0, "the sets submitted again what did not complete");
    read_back(&mut p, (0, 1), &written);
    assert_eq!(p.target.stats().controllers, 1, "the old association is gone");
}

/// A set's report that comes late, while the association is being made
/// again, does not start that over.
#[test]
fn a_late_report_does_not_undo_a_reconnect_under_way() {
    let delay = Duration::from_millis(100);
    let mut p = nvm(HostConfig { reconnect_delay: delay, ..Default::default() });
    p.ready();
    p.lend(&[1, 2, 3, 4]);
    let which = p.host.association();
    let e = HostError::Timeout("a command completion");
    let now = p.now;
    p.host.fail_association(e.clone(), which, now);
    while p.step() {}
    // The reconnect timer fires: the new association is on its way.
    p.now = p.now + delay;
    p.fire_timers();
    p.step();
    assert!(!p.host.is_ready() && p.host.is_reconnecting());
    let now = p.now;
    p.host.fail_association(e, which, now);
    settle(&mut p, |p| p.events.iter().any(|e| matches!(e, HostEvent::Reconnected)));
    let r = p.host.recovery();
    assert_eq!((r.lost, r.attempts, r.reconnects), (1, 1, 1), "one attempt, not two");
}

/// A command a set's controller never answers: the set has no admin
/// queue to abort it on, so it hands the association its trouble.
#[test]
fn a_command_timing_out_in_a_set_is_the_associations_trouble() {
    let timeout = Duration::from_secs(2);
    let mut p = nvm(HostConfig { command_timeout: timeout, ..Default::default() });
    p.ready();
    p.lend(&[1, 2, 3, 4]);
    // Nothing more reaches the controller on queue 1.
    p.h2c_filter = Some(Box::new(|qid, bytes| {
        if qid == 1 {
            bytes.clear();
        }
    }));
    let (io, _) = write(0, 1);
    let now = p.now;
    p.sets[0].0.submit(1, io, now).unwrap();
    p.run_for(timeout * 2);
    let lost = p.sets[0].1.iter().find_map(|e| match e {
        HostEvent::Reconnecting { error: Some(e), .. } => Some(e.clone()),
        _ => None,
    });
    assert_eq!(lost, Some(HostError::Timeout("a command completion")), "{:?}", p.sets[0].1);
    assert_eq!(p.host.recovery().aborts, 0, "nothing to abort with");
}

/// When the association fails for good, each set completes what it holds
/// with an error and reports the failure.
#[test]
fn a_set_abandoned_completes_what_it_holds_and_fails() {
    let mut p = nvm(HostConfig::default());
    p.ready();
    p.lend(&[1, 2, 3, 4]);
    p.h2c_filter = Some(Box::new(|_, bytes| bytes.clear()));
    let (io, _) = write(5, 5);
    let now = p.now;
    p.sets[0].0.submit(2, io, now).unwrap();
    while p.step() {}
    let e = HostError::Timeout("reconnect");
    p.sets[0].0.abandon(e.clone(), now);
    while p.step() {}
    let events = &p.sets[0].1;
    assert_eq!(completions(events), [(5, Status::HOST_PATH_ERROR)], "{events:?}");
    assert!(matches!(events.last(), Some(HostEvent::Failed(f)) if *f == e), "{events:?}");
}
