//! Reads a namespace lends instead of copying: the data a controller
//! queue answers a Read with is the namespace's own memory, and it never
//! changes afterwards, whatever the host writes next. That is what lets a
//! transport send it by reference and send it again after a loss, as
//! `sendfile` sends page-cache pages.

use nvme_of::Instant;
use nvme_of::controller::{Action, CtrlQueue, TargetConfig};
use nvme_of::nvme::{
    ConnectData, FabricsCommand, PropertySize, SglDescriptor, Sqe, Status, admin, fid, io, property,
};
use nvme_of::pair::{self, LOOPBACK, SUBNQN, pattern};
use nvme_storage::RamNamespace;
use std::sync::Arc;
use ulp_ddp::{IoBuf, SgEntry};

const HOST: &str = "nqn.2014-08.org.nvmexpress:uuid:lender";
const BLOCK: u64 = 512;

fn answer(a: Action) -> (Status, Option<SgEntry>) {
    match a {
        Action::Respond { cqe, data } => (Status::from_field(cqe.status), data),
        other => panic!("{other:?}"),
    }
}

/// Connect `q` as queue `qid` of controller `cntlid`; the controller's ID.
fn connect(q: &mut CtrlQueue, qid: u16, cntlid: u16) -> u16 {
    let d = ConnectData { hostid: [2; 16], cntlid, subnqn: SUBNQN.into(), hostnqn: HOST.into() };
    let mut raw = [0u8; ConnectData::LEN];
    d.emit(&mut raw);
    let cmd = FabricsCommand::Connect { recfmt: 0, qid, sqsize: 31, cattr: 0, kato: 0 };
    let sqe = cmd.to_sqe(SglDescriptor::in_capsule(ConnectData::LEN as u32));
    let data = Some((IoBuf::from_vec(raw.to_vec()), ConnectData::LEN));
    match q.submit(&sqe, data, None, Instant::ZERO) {
        Action::Respond { cqe, .. } if Status::from_field(cqe.status) == Status::SUCCESS => {
            cqe.dw0 as u16
        }
        other => panic!("connect qid {qid}: {other:?}"),
    }
}

/// An I/O queue of an enabled controller over `ns`, and its admin queue,
/// which must live as long.
fn io_queue(ns: Arc<RamNamespace>) -> (CtrlQueue, CtrlQueue) {
    let target = pair::target(TargetConfig::default(), ns);
    let mut admin_q = CtrlQueue::new(target.clone(), None, LOOPBACK);
    let cntlid = connect(&mut admin_q, 0, 0xffff);
    let enable = FabricsCommand::PropertySet {
        size: PropertySize::Four,
        offset: property::CC,
        value: u64::from(property::CC_ENABLE),
    };
    let (status, _) =
        answer(admin_q.submit(&enable.to_sqe(Default::default()), None, None, Instant::ZERO));
    assert_eq!(status, Status::SUCCESS);
    let mut queues = Sqe::new(admin::SET_FEATURES, 0, Default::default());
    queues.cdw10 = u32::from(fid::NUMBER_OF_QUEUES);
    let (status, _) = answer(admin_q.submit(&queues, None, None, Instant::ZERO));
    assert_eq!(status, Status::SUCCESS);
    let mut io_q = CtrlQueue::new(target, None, LOOPBACK);
    connect(&mut io_q, 1, cntlid);
    (io_q, admin_q)
}

fn read(q: &mut CtrlQueue, cid: u16, at: u64, len: u64) -> SgEntry {
    let sgl = SglDescriptor::transport(len as u32);
    let mut sqe = Sqe::rw(io::READ, 1, at / BLOCK, (len / BLOCK) as u32, sgl);
    sqe.cid = cid;
    match answer(q.submit(&sqe, None, None, Instant::ZERO)) {
        (Status::SUCCESS, Some(data)) => data,
        other => panic!("read {len} at {at}: {other:?}"),
    }
}

fn write(q: &mut CtrlQueue, cid: u16, at: u64, bytes: &[u8]) {
    let sgl = SglDescriptor::transport(bytes.len() as u32);
    let mut sqe = Sqe::rw(io::WRITE, 1, at / BLOCK, (bytes.len() as u64 / BLOCK) as u32, sgl);
    sqe.cid = cid;
    let Action::Fetch(n) = q.submit(&sqe, None, None, Instant::ZERO) else {
        panic!("a write fetches its data")
    };
    assert_eq!(n as usize, bytes.len());
    let data = Some((IoBuf::from_vec(bytes.to_vec()), bytes.len()));
    assert_eq!(answer(q.resume(&sqe, data, None, Instant::ZERO)).0, Status::SUCCESS);
}

fn bytes(e: &SgEntry) -> Vec<u8> {
    e.buf.lock()[e.offset..e.offset + e.len].to_vec()
}

#[test]
fn a_lent_read_keeps_its_bytes_when_a_write_to_them_follows() {
    let ns = Arc::new(RamNamespace::new(1 << 20, 512).unwrap());
    let old = pattern(1 << 20, 1);
    ns.write_at(0, &old).unwrap();
    let (mut q, _admin) = io_queue(ns.clone());

    // 64 KiB at 64 KiB: the second half of the namespace's first chunk.
    let lent = read(&mut q, 1, 64 << 10, 64 << 10);
    assert_eq!((lent.offset, lent.len), (64 << 10, 64 << 10), "the namespace's own chunk");
    assert_eq!(bytes(&lent), &old[64 << 10..128 << 10]);
    assert_eq!(ns.stats().lent_bytes, 64 << 10, "lent, not copied");

    // The host writes over part of it before the data has left (or while
    // a lost segment of it waits to be sent again).
    let new = pattern(8 << 10, 2);
    write(&mut q, 2, 80 << 10, &new);
    assert_eq!(bytes(&lent), &old[64 << 10..128 << 10], "what was answered never changes");

    // A read after the write sees it.
    let after = read(&mut q, 3, 64 << 10, 64 << 10);
    let got = bytes(&after);
    assert_eq!(&got[16 << 10..24 << 10], &new[..]);
    assert_eq!(&got[..16 << 10], &old[64 << 10..80 << 10]);
    assert_eq!(ns.stats().copied_on_write_bytes, 128 << 10);
}

#[test]
fn reads_the_namespace_does_not_lend_are_copied_into_a_buffer_of_ours() {
    let ns = Arc::new(RamNamespace::new(1 << 20, 512).unwrap());
    let old = pattern(1 << 20, 3);
    ns.write_at(0, &old).unwrap();
    let (mut q, _admin) = io_queue(ns.clone());
    // Small, and across two chunks.
    for (cid, at, len) in [(1, 4096, 4096), (2, 96 << 10, 64 << 10)] {
        let data = read(&mut q, cid, at, len);
        assert_eq!(data.offset, 0);
        assert_eq!(bytes(&data), &old[at as usize..(at + len) as usize]);
        // Ours: writing it changes nothing in the namespace.
        data.buf.lock()[0] ^= 0xff;
        let mut check = [0u8; 1];
        ns.read_at(at, &mut check).unwrap();
        assert_eq!(check[0], old[at as usize]);
    }
    assert_eq!(ns.stats().lent_bytes, 0);
}
