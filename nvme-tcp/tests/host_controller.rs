//! NVMe/TCP on the core's pair harness: host and controller joined by
//! in-memory byte streams, with time under the test's control. What is
//! the binding's own is tested here: PDUs and their digests, R2T and
//! H2CData, C2HData with SUCCESS, TermReqs; the core's behaviour is tested
//! in `nvme-of` over the loopback binding.

use nvme_of::Digests;
use nvme_of::controller::{Port, Target, TargetConfig};
use nvme_of::host::{HostConfig, HostError, HostEvent, Io, IoKind};
use nvme_of::nvme::{DISCOVERY_NQN, Status};
use nvme_of::pair::{self, Filter, Pair, SUBNQN, pattern};
use nvme_storage::RamNamespace;
use nvme_tcp::host::TcpError;
use nvme_tcp::wire::Fes;
use std::sync::Arc;
use ulp_ddp::IoBuf;

fn target(cfg: TargetConfig, size: u64, block: u32) -> Arc<Target> {
    pair::target(cfg, Arc::new(RamNamespace::new(size, block).unwrap()))
}

fn pair(host: HostConfig, target: Arc<Target>) -> Pair {
    Pair::new(nvme_tcp::host::new(host), Arc::new(nvme_tcp::controller::Tcp), target)
}

/// A host of the test subsystem against a 16 MiB namespace.
fn nvm(host: HostConfig) -> Pair {
    let host = HostConfig { subnqn: SUBNQN.into(), ..host };
    pair(host, target(TargetConfig::default(), 16 << 20, 512))
}

/// Write the whole namespace in varied sizes (in-capsule, one R2T, several
/// R2Ts, several C2HData), then read it back and compare, under each digest
/// combination and with tiny segments.
#[test]
fn write_then_verified_read_with_every_digest_combination() {
    for (header, data) in [(false, false), (true, false), (false, true), (true, true)] {
        let digests = Digests { header, data };
        let cfg = TargetConfig {
            r2t_len: 8192,
            c2h_data_len: 16384,
            inline_data_size: 4096,
            ..TargetConfig::default()
        };
        let host = HostConfig { subnqn: SUBNQN.into(), digests, maxr2t: 2, ..Default::default() };
        let mut p = pair(host, target(cfg, 1 << 20, 4096));
        p.chunk = if header { 1000 } else { 65536 };
        p.ready();
        let sizes = [1u32, 8, 3, 32, 2, 16, 1, 64];
        let mut lba = 0u64;
        let mut written = Vec::new();
        for (i, &nlb) in sizes.iter().cycle().enumerate() {
            if lba + u64::from(nlb) > 256 {
                break;
            }
            let data = pattern(nlb as usize * 4096, i as u64 + 1);
            let status = p.io(1, IoKind::Write, lba, nlb, Some(IoBuf::from_vec(data.clone())));
            assert_eq!(status, Status::SUCCESS);
            written.push((lba, nlb, data));
            lba += u64::from(nlb);
        }
        for (lba, nlb, data) in &written {
            let buf = IoBuf::new(*nlb as usize * 4096);
            assert_eq!(p.io(1, IoKind::Read, *lba, *nlb, Some(buf.clone())), Status::SUCCESS);
            assert!(buf.to_vec() == *data, "lba {lba} differs ({digests:?})");
        }
        let (rx, tx) = p.host.stats();
        assert_eq!(rx.data_bytes, lba * 4096);
        assert_eq!(rx.crc_bytes, if data { lba * 4096 } else { 0 });
        // Sent data includes the I/O queue's 1024-byte Connect data.
        assert_eq!(tx.data_bytes, lba * 4096 + 1024);
        assert_eq!(tx.crc_bytes, if data { lba * 4096 + 1024 } else { 0 });
    }
}

#[test]
fn success_flag_replaces_the_capsule_resp_without_sq_flow_control() {
    let host = HostConfig { disable_sq_flow_control: true, ..Default::default() };
    let mut p = nvm(host);
    let resps = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = resps.clone();
    let mut framer = nvme_tcp::wire::Framer::new(nvme_tcp::wire::Direction::ControllerToHost);
    p.c2h_filter = Some(Box::new(move |qid, bytes| {
        // Count CapsuleResp PDUs on the I/O queue (after its ICResp).
        if qid != 1 {
            return;
        }
        let mut at = 0;
        while let Ok((n, Some(ev))) = framer.next(&bytes[at..]) {
            at += n;
            if let nvme_tcp::wire::Event::Header(r) = ev
                && r.pdu_type() == nvme_tcp::wire::PduType::CapsuleResp
            {
                counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
        }
    }));
    p.ready();
    let data = pattern(4096, 7);
    assert_eq!(p.io(1, IoKind::Write, 8, 8, Some(IoBuf::from_vec(data.clone()))), Status::SUCCESS);
    let before = resps.load(std::sync::atomic::Ordering::Relaxed);
    let buf = IoBuf::new(4096);
    assert_eq!(p.io(1, IoKind::Read, 8, 8, Some(buf.clone())), Status::SUCCESS);
    assert_eq!(buf.to_vec(), data);
    assert_eq!(
        resps.load(std::sync::atomic::Ordering::Relaxed),
        before,
        "no CapsuleResp after a SUCCESS read"
    );
}

/// Rewrite the Dataset Management capsule on queue 1 to carry `data_len`
/// bytes of in-capsule data (the range, then zeros, or the range cut short).
fn resize_dsm(data_len: usize) -> Filter {
    Box::new(move |qid, bytes| {
        // CapsuleCmd, no digests: 8-byte header, 64-byte SQE, data.
        if qid != 1 || bytes.len() < 72 + 16 || bytes[0] != 0x04 || bytes[8] != 0x09 {
            return;
        }
        bytes.truncate(72);
        let mut data = vec![0u8; data_len];
        let range: Vec<u8> = [0u32.to_le_bytes(), 4u32.to_le_bytes()]
            .concat()
            .into_iter()
            .chain(104u64.to_le_bytes())
            .collect();
        let n = data_len.min(16);
        data[..n].copy_from_slice(&range[..n]);
        bytes.extend_from_slice(&data);
        let plen = bytes.len() as u32;
        bytes[4..8].copy_from_slice(&plen.to_le_bytes());
        // SGL length: DPTR at SQE byte 24, its length at byte 8 of it.
        bytes[8 + 32..8 + 36].copy_from_slice(&(data_len as u32).to_le_bytes());
    })
}

#[test]
fn dataset_management_takes_a_page_of_ranges_as_linux_sends_it() {
    // Linux sends Deallocate a zeroed page of ranges whatever NR says; the
    // SGL may be longer than the data (SGLS bit 18), never shorter.
    let mut p = nvm(HostConfig::default());
    p.ready();
    let data = pattern(16 * 512, 5);
    assert_eq!(
        p.io(1, IoKind::Write, 100, 16, Some(IoBuf::from_vec(data.clone()))),
        Status::SUCCESS
    );
    assert_ne!(p.host.controller().unwrap().sgls & (1 << 18), 0, "SGLS bit 18 advertised");
    p.h2c_filter = Some(resize_dsm(4096));
    assert_eq!(p.io(1, IoKind::Deallocate, 104, 4, None), Status::SUCCESS);
    p.h2c_filter = Some(resize_dsm(8));
    assert_eq!(p.io(1, IoKind::Deallocate, 104, 4, None), Status::DATA_SGL_LENGTH_INVALID);
    p.h2c_filter = None;
    let buf = IoBuf::new(16 * 512);
    assert_eq!(p.io(1, IoKind::Read, 100, 16, Some(buf.clone())), Status::SUCCESS);
    let got = buf.to_vec();
    assert_eq!(&got[..2048], &data[..2048]);
    assert!(got[2048..4096].iter().all(|&b| b == 0), "blocks 104..108 deallocated");
    assert_eq!(&got[4096..], &data[4096..]);
    assert!(p.failure().is_none());
}

#[test]
fn discovery_lists_the_subsystem() {
    let port = Port { traddr: "0.0.0.0".into(), trsvcid: "4420".into(), portid: 1 };
    let cfg = TargetConfig { port: Some(port), ..TargetConfig::default() };
    let t = target(cfg, 1 << 20, 512);
    let mut p = pair(HostConfig { subnqn: DISCOVERY_NQN.into(), ..Default::default() }, t);
    p.run_until(|ev| ev.iter().any(|e| matches!(e, HostEvent::Closed | HostEvent::Failed(_))));
    let entries = p
        .events
        .iter()
        .find_map(|e| if let HostEvent::Discovered(v) = e { Some(v.clone()) } else { None });
    let entries = entries.expect("a discovery log");
    assert_eq!(entries.len(), 1);
    assert_eq!(entries[0].subnqn, SUBNQN);
    assert_eq!(entries[0].trsvcid, "4420");
    assert_eq!(entries[0].trtype, 3);
    assert!(p.events.iter().any(|e| matches!(e, HostEvent::Closed)), "{:?}", p.events);
    assert_eq!(p.target.stats().controllers, 0, "shutdown released the controller");
}

#[test]
fn malformed_pdu_from_the_host_gets_a_term_req() {
    let mut p = nvm(HostConfig::default());
    p.ready();
    // Corrupt the HLEN of the next capsule on queue 1.
    let armed = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let a = armed.clone();
    p.h2c_filter = Some(Box::new(move |qid, bytes| {
        if qid == 1 && a.swap(false, std::sync::atomic::Ordering::Relaxed) {
            bytes[2] = 71;
        }
    }));
    let term = Arc::new(std::sync::Mutex::new(None));
    let t = term.clone();
    p.c2h_filter = Some(Box::new(move |qid, bytes| {
        if qid == 1 && bytes[0] == 0x03 {
            *t.lock().unwrap() = Some(bytes.clone());
        }
    }));
    let tag = 77;
    p.host
        .submit(1, Io { kind: IoKind::Flush, nsid: 1, slba: 0, nlb: 0, buf: None, tag }, p.now)
        .unwrap();
    p.run_until(|ev| ev.iter().any(|e| matches!(e, HostEvent::Reconnecting { .. })));
    let bytes = term.lock().unwrap().clone().expect("a C2HTermReq");
    assert_eq!(bytes.len(), 24 + 8, "quotes the 8 header bytes it could read");
    assert_eq!(u16::from_le_bytes([bytes[8], bytes[9]]), 1, "FES: invalid header field");
    assert_eq!(u32::from_le_bytes([bytes[10], bytes[11], bytes[12], bytes[13]]), 2, "FEI: HLEN");
    match p.loss() {
        Some(HostError::Queue { qid: 1, error }) => assert_eq!(
            error.downcast_ref::<TcpError>(),
            Some(&TcpError::Terminated { fes: Fes::InvalidHeaderField, fei: 2 })
        ),
        other => panic!("{other:?}"),
    }
}

#[test]
fn malformed_pdu_from_the_controller_gets_an_h2c_term_req() {
    let mut p = nvm(HostConfig::default());
    p.ready();
    let armed = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let a = armed.clone();
    p.c2h_filter = Some(Box::new(move |qid, bytes| {
        // An unknown PDU type instead of the next CapsuleResp.
        if qid == 1 && a.swap(false, std::sync::atomic::Ordering::Relaxed) {
            bytes[0] = 0x08;
        }
    }));
    let seen = Arc::new(std::sync::Mutex::new(None));
    let s = seen.clone();
    p.h2c_filter = Some(Box::new(move |qid, bytes| {
        if qid == 1 && bytes[0] == 0x02 {
            *s.lock().unwrap() = Some(bytes.clone());
        }
    }));
    p.host
        .submit(1, Io { kind: IoKind::Flush, nsid: 1, slba: 0, nlb: 0, buf: None, tag: 1 }, p.now)
        .unwrap();
    p.run_until(|ev| ev.iter().any(|e| matches!(e, HostEvent::Reconnecting { .. })));
    let bytes = seen.lock().unwrap().clone().expect("an H2CTermReq");
    assert_eq!((bytes[8], bytes[10]), (0x01, 0x00), "FES 1, FEI 0 (PDU-Type)");
    match p.loss() {
        Some(HostError::Queue { qid: 1, error }) => {
            assert!(matches!(error.downcast_ref::<TcpError>(), Some(TcpError::Protocol(_))))
        }
        other => panic!("{other:?}"),
    }
}

/// An error the controller lets the host retry (DNR clear: a data digest
/// error) is submitted again; one with DNR set is not.
#[test]
fn a_retryable_error_is_retried_and_a_dnr_error_is_not() {
    let digests = Digests { header: false, data: true };
    let mut p = nvm(HostConfig { digests, ..Default::default() });
    p.ready();
    let data = pattern(4096, 9);
    assert_eq!(p.io(1, IoKind::Write, 0, 8, Some(IoBuf::from_vec(data.clone()))), Status::SUCCESS);
    // Flip a data byte of the next C2HData: its digest no longer matches.
    let armed = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let a = armed.clone();
    p.c2h_filter = Some(Box::new(move |qid, bytes| {
        if qid == 1 && bytes[0] == 0x07 && a.swap(false, std::sync::atomic::Ordering::Relaxed) {
            bytes[30] ^= 1;
        }
    }));
    let buf = IoBuf::new(4096);
    assert_eq!(p.io(1, IoKind::Read, 0, 8, Some(buf.clone())), Status::SUCCESS);
    assert_eq!(buf.to_vec(), data);
    assert_eq!(p.host.recovery().retried, 1);
    let blocks = p.host.namespaces()[0].blocks;
    assert_eq!(p.io(1, IoKind::Read, blocks, 1, Some(buf)), Status::LBA_OUT_OF_RANGE);
    assert_eq!(p.host.recovery().retried, 1, "DNR: not retried");
    assert_eq!(p.host.recovery().reconnects, 0);
}
