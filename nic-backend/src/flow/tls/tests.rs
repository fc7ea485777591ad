//! The TLS socket driven directly: records sealed by OpenSSL's own AEAD
//! (not the NIC's code) cut into segments at awkward places; what the
//! stack would get, the hints, and the resync requests out.

use super::Tls;
use crate::flow::{Env, Socket};
use crate::place::Placed;
use openssl::symm::{Cipher, encrypt_aead};
use ulp_ddp::tls::record::{HEADER, TAG};
use ulp_ddp::{Caps, HintFlags, Stats, TlsCipher, TlsCryptoInfo, TlsDirection, TlsStart};
use zeroize::Zeroizing;

fn info(cipher: TlsCipher, rec_seq: u64) -> TlsCryptoInfo {
    TlsCryptoInfo {
        cipher,
        key: Zeroizing::new((100..100 + cipher.key_len() as u8).collect()),
        salt: [9, 8, 7, 6],
        iv: [1, 2, 3, 4, 5, 6, 7, 8],
        rec_seq,
    }
}

/// Record `seq` carrying `content` (application data, no padding), sealed.
fn seal(i: &TlsCryptoInfo, seq: u64, content: &[u8]) -> Vec<u8> {
    let cipher = match i.cipher {
        TlsCipher::Aes128Gcm => Cipher::aes_128_gcm(),
        TlsCipher::Aes256Gcm => Cipher::aes_256_gcm(),
    };
    let mut inner = content.to_vec();
    inner.push(23);
    let len = (inner.len() + TAG) as u16;
    let mut header = vec![23, 3, 3];
    header.extend_from_slice(&len.to_be_bytes());
    let mut tag = [0u8; TAG];
    let sealed =
        encrypt_aead(cipher, &i.key, Some(&i.nonce(seq)), &header, &inner, &mut tag).unwrap();
    [header, sealed, tag.to_vec()].concat()
}

/// The record in the clear, as software frames it for the NIC to seal.
fn framed(content: &[u8]) -> Vec<u8> {
    let len = (content.len() + 1 + TAG) as u16;
    let mut r = vec![23, 3, 3];
    r.extend_from_slice(&len.to_be_bytes());
    r.extend_from_slice(content);
    r.push(23);
    r.extend_from_slice(&[0; TAG]);
    r
}

fn content(seq: u64, len: usize) -> Vec<u8> {
    (0..len).map(|i| (i as u64 * 31 + seq * 7) as u8).collect()
}

struct Rx {
    tls: Tls,
    stats: Stats,
    /// What the stack would hold, as the segments left the NIC.
    got: Vec<u8>,
}

impl Rx {
    fn new(i: &TlsCryptoInfo) -> Self {
        let mut tls = Tls::new(0, 0, 0);
        tls.add(TlsDirection::Rx, i, TlsStart::default()).unwrap();
        Self { tls, stats: Stats::default(), got: Vec::new() }
    }

    /// `stream[range]` arrives as one segment; in-order bytes land in `got`.
    fn segment(&mut self, stream: &[u8], range: std::ops::Range<usize>) -> Vec<u8> {
        let mut seg = stream[range.clone()].to_vec();
        let mut placed = Placed::default();
        let mut env = Env { active: Caps::ALL, stats: &mut self.stats, placed: &mut placed };
        self.tls.rx_segment_mut(range.start as u64, &mut seg, &mut env);
        if range.start <= self.got.len() && range.end > self.got.len() {
            self.got.extend_from_slice(&seg[self.got.len() - range.start..]);
        }
        seg
    }

    /// Ranges hinted decrypted (bodies) or verified (tags), adjacent
    /// ones joined: a record vouched for is one range, body and tag.
    fn decrypted(&self, from: u64, to: u64) -> Vec<(u64, u64)> {
        let mut v: Vec<(u64, u64)> = Vec::new();
        self.tls.ctx.with_hints(from, to, |a, b, h| {
            if h.flags.contains(HintFlags::DECRYPTED) || h.flags.contains(HintFlags::TAG_OK) {
                match v.last_mut() {
                    Some(last) if last.1 == a => last.1 = b,
                    _ => v.push((a, b)),
                }
            }
        });
        v
    }
}

/// Records of `sizes`, numbered from `seq`, back to back; their spans.
fn stream(i: &TlsCryptoInfo, seq: u64, sizes: &[usize]) -> (Vec<u8>, Vec<(usize, usize)>) {
    let mut s = Vec::new();
    let mut spans = Vec::new();
    for (k, &n) in sizes.iter().enumerate() {
        let at = s.len();
        s.extend(seal(i, seq + k as u64, &content(seq + k as u64, n)));
        spans.push((at, s.len()));
    }
    (s, spans)
}

#[test]
fn records_cut_anywhere_are_decrypted_in_place_and_vouched_for() {
    for cipher in [TlsCipher::Aes128Gcm, TlsCipher::Aes256Gcm] {
        let i = info(cipher, 3);
        let sizes = [1000, 1, 16384, 77];
        let (s, spans) = stream(&i, 3, &sizes);
        let mut rx = Rx::new(&i);
        // Cuts inside headers, bodies and tags.
        let mut at = 0;
        for step in [2, 700, 305, 20, 9000, 3, 7000].iter().cycle() {
            let end = (at + step).min(s.len());
            rx.segment(&s, at..end);
            at = end;
            if at == s.len() {
                break;
            }
        }
        for (k, &(a, b)) in spans.iter().enumerate() {
            let body = a + HEADER;
            assert_eq!(rx.got[a..body], s[a..body], "headers go up as they came");
            assert_eq!(rx.got[body..b - TAG - 1], content(3 + k as u64, sizes[k])[..]);
            assert_eq!(rx.got[b - TAG - 1], 23, "the content type, decrypted");
            assert_eq!(rx.decrypted(a as u64, b as u64), vec![(body as u64, b as u64)]);
        }
        assert_eq!(rx.stats.rx_tls_records, 4);
        assert!(rx.tls.rx_synced());
    }
}

#[test]
fn a_record_whose_tag_fails_is_not_vouched_for() {
    let i = info(TlsCipher::Aes128Gcm, 0);
    let (mut s, spans) = stream(&i, 0, &[500, 500]);
    s[spans[0].1 - 1] ^= 0x80;
    let mut rx = Rx::new(&i);
    rx.segment(&s, 0..s.len());
    let (a, b) = spans[0];
    assert_eq!(rx.decrypted(a as u64, b as u64), vec![((a + HEADER) as u64, (b - TAG) as u64)]);
    assert_eq!(rx.stats.rx_tls_auth_fail, 1);
    let (a, b) = spans[1];
    assert_eq!(rx.decrypted(a as u64, b as u64), vec![((a + HEADER) as u64, b as u64)]);
}

/// A gap inside a record's body: that record cannot be vouched for (its
/// tag cannot be checked), but its bytes after the gap are decrypted all
/// the same (counter mode needs only their place), and the next record is
/// the NIC's again.
#[test]
fn a_gap_in_a_body_costs_that_record_its_tag_alone() {
    let i = info(TlsCipher::Aes128Gcm, 0);
    let (s, spans) = stream(&i, 0, &[3000, 3000]);
    let mut rx = Rx::new(&i);
    rx.segment(&s, 0..1000);
    let after = rx.segment(&s, 1500..s.len());
    let (a, b) = spans[0];
    let tag_at = (b - TAG) as u64;
    assert_eq!(rx.decrypted(a as u64, b as u64), vec![(HEADER as u64, 1000), (1500, tag_at)]);
    assert_eq!(after[..3000 - 1500 + HEADER], content(0, 3000)[1500 - HEADER..], "plaintext");
    let (a, b) = spans[1];
    assert_eq!(rx.decrypted(a as u64, b as u64), vec![((a + HEADER) as u64, b as u64)]);
    // The missing bytes come again, as ciphertext: they pass as they are,
    // and the decrypted bytes around them, sent again too, are decrypted
    // again to match what the stack may already hold.
    let again = rx.segment(&s, 900..1600);
    assert_eq!(again[..100], rx.got[900..1000]);
    assert_eq!(again[100..600], s[1000..1500]);
    assert_eq!(again[600..], after[..100]);
    assert!(rx.stats.rx_tls_resync_req == 0);
}

/// A lost header whose place and number the NIC knew: one record fits
/// before the next header it finds, so that one is numbered on, its tag
/// proves it, and the NIC never had to ask.
#[test]
fn after_a_lost_header_the_next_record_is_guessed_and_proven() {
    let i = info(TlsCipher::Aes128Gcm, 10);
    let (s, spans) = stream(&i, 10, &[2000; 6]);
    let mut rx = Rx::new(&i);
    rx.segment(&s, 0..1000);
    // Lost: the end of record 0 and the header of record 1.
    rx.segment(&s, spans[1].0 + 3..s.len());
    assert_eq!((rx.stats.rx_tls_resync_guess, rx.stats.rx_tls_resync_guess_ok), (1, 1));
    assert_eq!(rx.stats.rx_tls_resync_req, 0, "nothing asked");
    assert!(rx.tls.ctx.take_resync_request().is_none());
    for &(a, b) in &spans[2..] {
        assert_eq!(rx.decrypted(a as u64, b as u64), vec![((a + HEADER) as u64, b as u64)]);
    }
    assert_eq!(rx.stats.rx_tls_records, 4);
    assert!(rx.tls.rx_synced());
}

/// Full-size records in jumbo frames: a header and the next one are
/// never in one segment. After a lost header, the first record found is
/// numbered by a guess at once, rather than let go by while the header
/// after it is awaited; with no second header to vouch for it, it is
/// decrypted in a copy of the NIC's own and the stream left as it came.
/// Its tag proves the guess, and the records after it are the NIC's.
#[test]
fn the_first_record_found_after_a_lost_header_is_guessed_in_a_copy() {
    let i = info(TlsCipher::Aes128Gcm, 0);
    let (s, spans) = stream(&i, 0, &[16_000; 6]);
    let mut rx = Rx::new(&i);
    let lost = spans[1].0 / 9000;
    let mut out = s.clone();
    for (k, from) in (0..s.len()).step_by(9000).enumerate() {
        let to = (from + 9000).min(s.len());
        if k != lost {
            out[from..to].copy_from_slice(&rx.segment(&s, from..to));
        }
    }
    assert_eq!((rx.stats.rx_tls_resync_guess, rx.stats.rx_tls_resync_guess_ok), (1, 1));
    let (a, b) = spans[2];
    assert!(rx.decrypted(a as u64, b as u64).is_empty(), "software opens it");
    assert_eq!(out[a..b], s[a..b], "as it came");
    for &(a, b) in &spans[3..] {
        assert_eq!(rx.decrypted(a as u64, b as u64), vec![((a + HEADER) as u64, b as u64)]);
    }
    assert_eq!(rx.stats.rx_tls_records, 3);
    assert_eq!(rx.stats.rx_tls_resync_req, 0);
}

/// Ciphertext after a loss that looks like a record header is guessed on
/// like one, but only in the NIC's copy: when its "tag" fails, nothing of
/// the stream was touched and no guess is noted, so software, which finds
/// records by their real headers, has nothing to undo.
#[test]
fn a_false_header_guessed_on_after_a_loss_leaves_the_stream_untouched() {
    let i = info(TlsCipher::Aes128Gcm, 0);
    let (mut s, spans) = stream(&i, 0, &[16_000; 6]);
    let fake = 20_000;
    assert!(spans[1].0 < 18_000 && fake + 16_022 > spans[2].0, "inside record 1, past 2's start");
    s[fake..fake + HEADER].copy_from_slice(&[23, 3, 3, 0x3e, 0x91]);
    let mut rx = Rx::new(&i);
    rx.segment(&s, 0..9000);
    // Record 1's header lost with the segment after 9000; the hunt meets
    // the false header in the next one.
    let mut out = Vec::new();
    for from in (18_000..s.len()).step_by(9000) {
        out.extend(rx.segment(&s, from..(from + 9000).min(s.len())));
    }
    assert_eq!((rx.stats.rx_tls_resync_guess, rx.stats.rx_tls_resync_guess_ok), (1, 0));
    assert_eq!(out[..spans[3].0 - 18_000], s[18_000..spans[3].0], "not a byte rewritten");
    assert!(rx.tls.ctx.take_guess((fake + HEADER) as u64).is_none(), "nothing to undo");
    assert!(rx.decrypted(18_000, spans[3].0 as u64).is_empty());
    assert_eq!(rx.stats.rx_tls_resync_req, 1, "refuted: the ULP asked");
}

/// A guess its record's tag could not prove (the record was cut short at
/// its end) is carried to the next record, and the next, whose tag proves
/// it. The first was guessed on alone (its successor's header was in a
/// later segment), in a copy; those after it came at its length, and are
/// decrypted in place.
#[test]
fn a_guess_a_gap_left_unproven_is_proven_by_the_next_tag() {
    let i = info(TlsCipher::Aes128Gcm, 3);
    let (s, spans) = stream(&i, 3, &[2000; 6]);
    let mut rx = Rx::new(&i);
    rx.segment(&s, 0..1000);
    // Lost: record 1's header. Record 2's header is seen, its successor's
    // not: record 2 is guessed on alone, then cut short at its end.
    rx.segment(&s, spans[1].0 + 3..spans[2].0 + 50);
    rx.segment(&s, spans[3].0..spans[3].0 + 100);
    assert_eq!(rx.stats.rx_tls_resync_guess, 1);
    // The rest of record 3 lost, to its very end.
    rx.segment(&s, spans[4].0..s.len());
    let (a, b) = spans[4];
    assert_eq!(rx.tls.ctx.take_guess((a + HEADER) as u64), Some(3 + 4), "record 4: a guess too");
    assert_eq!(rx.stats.rx_tls_resync_guess_ok, 1);
    assert_eq!(rx.decrypted(a as u64, b as u64), vec![((a + HEADER) as u64, b as u64)]);
    assert_eq!(rx.stats.rx_tls_resync_req, 0);
}

/// Two headers lost: the guess that one record lay between is refuted by
/// the tag (and noted, for software to undo what was decrypted under it);
/// then records are found again, the ULP confirms, and the NIC goes on.
#[test]
fn after_lost_headers_records_are_found_confirmed_and_decrypted_again() {
    let i = info(TlsCipher::Aes256Gcm, 10);
    let (s, spans) = stream(&i, 10, &[2000; 8]);
    let mut rx = Rx::new(&i);
    rx.segment(&s, 0..1000);
    // Lost: the end of record 0 and the headers of records 1 and 2.
    let from = spans[2].0 + 3;
    let last = spans[5].0 + 10;
    rx.segment(&s, from..last);
    assert_eq!((rx.stats.rx_tls_resync_guess, rx.stats.rx_tls_resync_guess_ok), (1, 0));
    let (a, b) = spans[3];
    assert_eq!(rx.decrypted(a as u64, b as u64), vec![((a + HEADER) as u64, (b - TAG) as u64)]);
    assert_eq!(rx.tls.ctx.take_guess((a + HEADER) as u64), Some(12), "record 3 taken for 12");
    assert!(!rx.tls.rx_synced());
    let asked = rx.tls.ctx.take_resync_request().expect("a resync request");
    assert_eq!(asked, spans[4].0 as u64, "the first header a second one follows");
    assert_eq!(rx.stats.rx_tls_resync_req, 1);
    // Nothing decrypted while unconfirmed.
    assert!(rx.decrypted(spans[4].0 as u64, last as u64).is_empty());
    // A wrong offset is no confirmation; the right one is.
    let mut stats = Stats::default();
    rx.tls.tls_resync(TlsStart { tcp: asked + 1, inner: 0 }, 14, &mut stats);
    assert!(!rx.tls.rx_synced());
    rx.tls.tls_resync(TlsStart { tcp: asked, inner: 0 }, 14, &mut stats);
    assert_eq!(stats.rx_tls_resync_res_ok, 1);
    let seg = rx.segment(&s, last..s.len());
    // Record 5 was under way at the confirmation; 6 on are the NIC's.
    assert!(rx.decrypted(spans[5].0 as u64, spans[5].1 as u64).is_empty());
    for (k, &(a, b)) in spans.iter().enumerate().skip(6) {
        assert_eq!(rx.decrypted(a as u64, b as u64), vec![((a + HEADER) as u64, b as u64)]);
        let body = a + HEADER - last;
        assert_eq!(seg[body..body + 2000], content(10 + k as u64, 2000));
    }
    assert_eq!(rx.stats.rx_tls_records, 2);
}

/// Bytes past the offload's start went by before it began: the stack
/// may hold them as they came, so a copy of them that comes again (a
/// retransmission) is not decrypted, and records are found again after.
#[test]
fn records_that_went_by_before_the_offload_are_left_as_they_came() {
    let i = info(TlsCipher::Aes128Gcm, 0);
    let (s, spans) = stream(&i, 0, &[500; 4]);
    let mut tls = Tls::new(0, 0, spans[1].1 as u64);
    tls.add(TlsDirection::Rx, &i, TlsStart::default()).unwrap();
    let mut rx = Rx { tls, stats: Stats::default(), got: Vec::new() };
    let again = rx.segment(&s, 0..spans[1].1);
    assert_eq!(again, s[..spans[1].1], "not decrypted in place of what the stack holds");
    assert!(rx.decrypted(0, spans[1].1 as u64).is_empty());
    rx.segment(&s, spans[1].1..s.len());
    assert_eq!(rx.stats.rx_tls_resync_req, 1, "records found again, and asked about");
}

#[test]
fn without_the_capability_records_go_up_as_they_came() {
    let i = info(TlsCipher::Aes128Gcm, 0);
    let (s, _) = stream(&i, 0, &[100, 100]);
    let mut tls = Tls::new(0, 0, 0);
    tls.add(TlsDirection::Rx, &i, TlsStart::default()).unwrap();
    let mut stats = Stats::default();
    let mut placed = Placed::default();
    let mut env = Env { active: Caps::DDP, stats: &mut stats, placed: &mut placed };
    let mut seg = s.clone();
    tls.rx_segment_mut(0, &mut seg, &mut env);
    assert_eq!(seg, s);
    assert_eq!(stats.rx_tls_records, 0);
}

#[test]
fn transmitted_records_are_sealed_and_sealed_again_on_retransmission() {
    for cipher in [TlsCipher::Aes128Gcm, TlsCipher::Aes256Gcm] {
        let i = info(cipher, 5);
        let sizes = [1200, 1, 16384, 40];
        let clear: Vec<u8> =
            sizes.iter().enumerate().flat_map(|(k, &n)| framed(&content(k as u64, n))).collect();
        let want: Vec<u8> = sizes
            .iter()
            .enumerate()
            .flat_map(|(k, &n)| seal(&i, 5 + k as u64, &content(k as u64, n)))
            .collect();
        let mut tls = Tls::new(0, 0, 0);
        tls.add(TlsDirection::Tx, &i, TlsStart::default()).unwrap();
        let mut stats = Stats::default();
        let mut placed = Placed::default();
        let mut send = |tls: &mut Tls, stats: &mut Stats, a: usize, b: usize| {
            let mut seg = clear[a..b].to_vec();
            let mut env = Env { active: Caps::ALL, stats, placed: &mut placed };
            tls.tx_segment(a as u64, &mut seg, &mut env);
            seg
        };
        let mut out = Vec::new();
        for (a, b) in [(0, 3), (3, 1200), (1200, 1230), (1230, 9000), (9000, clear.len())] {
            out.extend(send(&mut tls, &mut stats, a, b));
        }
        assert_eq!(out, want, "{cipher:?}");
        assert_eq!(stats.tx_tls_records, 4);
        // Retransmissions: across a tag, inside a body, from a header.
        for (a, b) in [(1200, 1260), (5000, 9000), (0, clear.len())] {
            assert_eq!(send(&mut tls, &mut stats, a, b), want[a..b], "again {a}..{b}");
        }
        assert_eq!(stats.tx_tls_ooo, 3);
        // Acknowledged, the records are forgotten; sent again regardless,
        // their bytes go as zeros, never in the clear.
        tls.tx_acked(clear.len() as u64);
        assert_eq!(send(&mut tls, &mut stats, 0, 100), [0; 100]);
        // An acknowledgment of more than was sent counts up to what was:
        // the record under way stays, and goes again sealed.
        let mut tls = Tls::new(0, 0, 0);
        tls.add(TlsDirection::Tx, &i, TlsStart::default()).unwrap();
        send(&mut tls, &mut stats, 0, 1230);
        tls.tx_acked(u64::MAX / 2);
        assert_eq!(send(&mut tls, &mut stats, 1222, 1230), want[1222..1230]);
        assert_eq!(send(&mut tls, &mut stats, 1000, 1100), [0; 100], "record 0 is acknowledged");
    }
}

#[test]
fn a_stream_that_is_not_records_goes_out_as_zeros() {
    let i = info(TlsCipher::Aes128Gcm, 0);
    let mut tls = Tls::new(0, 0, 0);
    tls.add(TlsDirection::Tx, &i, TlsStart::default()).unwrap();
    let mut stats = Stats::default();
    let mut placed = Placed::default();
    let mut env = Env { active: Caps::ALL, stats: &mut stats, placed: &mut placed };
    let mut stream = framed(b"fine");
    stream.extend_from_slice(b"ICReq in the clear, never");
    let mut seg = stream.clone();
    tls.tx_segment(0, &mut seg, &mut env);
    let r = framed(b"fine").len();
    assert!(seg[r..].iter().all(|&b| b == 0));
    assert_ne!(seg[..r], stream[..r]);
    let mut again = stream.clone();
    tls.tx_segment(0, &mut again, &mut env);
    assert_eq!(again, seg, "and again");
}

mod inside {
    //! The NVMe/TCP flow inside the records: C2HData placed and digested
    //! from the plaintext, by its own offsets; what it kept out of the
    //! ring noted as fragments by TCP offset.

    use super::*;
    use crate::flow::nvme_tcp::NvmeTcp;
    use crate::pdu::tests::c2h;
    use crate::place::Mapping;
    use ulp_ddp::{IoBuf, SgEntry};

    const CID: u16 = 3;

    /// A TLS socket with a host's NVMe/TCP flow inside, `buf` mapped to
    /// `CID`; the records' content starts at inner offset `inner`.
    fn socket(i: &TlsCryptoInfo, buf: &IoBuf, inner: u64) -> Tls {
        let mut flow = NvmeTcp::host_flow(16, inner);
        let sgl = ulp_ddp::sgl![SgEntry { buf: buf.clone(), offset: 0, len: buf.len() }];
        *flow.proto.slot(CID).unwrap() = Some(Mapping::new(sgl, false, true));
        let mut tls = Tls::new(0, 0, 0);
        tls.add(TlsDirection::Rx, i, TlsStart { tcp: 0, inner }).unwrap();
        tls.inner = Some(Box::new(flow));
        tls
    }

    /// `pdus` carried in records of at most `each` content bytes.
    fn records(i: &TlsCryptoInfo, pdus: &[u8], each: usize) -> Vec<u8> {
        pdus.chunks(each).enumerate().flat_map(|(k, c)| seal(i, k as u64, c)).collect()
    }

    fn run(tls: &mut Tls, stream: &[u8], cut: usize) -> (Stats, Vec<u8>, u64) {
        let mut stats = Stats::default();
        let mut got = Vec::new();
        let mut kept_out = 0;
        for (k, piece) in stream.chunks(cut).enumerate() {
            let mut seg = piece.to_vec();
            let at = (k * cut) as u64;
            let mut placed = Placed { zero_copy: true, base: at, ..Placed::default() };
            let mut env = Env { active: Caps::ALL, stats: &mut stats, placed: &mut placed };
            tls.rx_segment_mut(at, &mut seg, &mut env);
            kept_out += placed.ranges.iter().map(|r| (r.end - r.start) as u64).sum::<u64>();
            got.extend(seg);
        }
        (stats, got, kept_out)
    }

    #[test]
    fn c2h_data_inside_records_is_placed_digested_and_found_again() {
        let i = info(TlsCipher::Aes128Gcm, 0);
        let data: Vec<u8> = (0..20_000u32).map(|x| (x * 13) as u8).collect();
        let pdus =
            [c2h(CID, 0, &data[..12_000], false, 24), c2h(CID, 12_000, &data[12_000..], false, 24)]
                .concat();
        let stream = records(&i, &pdus, 5000);
        let buf = IoBuf::new(data.len());
        let mut tls = socket(&i, &buf, 100);
        let (stats, got, kept_out) = run(&mut tls, &stream, 1448);
        assert_eq!(buf.lock()[..], data[..], "placed from the plaintext");
        assert_eq!((stats.nic_placed_bytes, stats.nic_crc_bytes), (20_000, 20_000));
        assert_eq!(kept_out, 20_000, "all of it kept out of the ring");
        // The inner hints are by the inner offsets: content from 100 on.
        let inner = tls.inner.as_ref().unwrap().ctx().clone();
        let mut placed = 0;
        inner.with_hints(100, 100 + pdus.len() as u64, |a, b, h| {
            if h.flags.contains(HintFlags::PLACED.union(HintFlags::CRC_OK)) {
                placed += b - a;
            }
        });
        assert_eq!(placed, 20_000);
        // The fragments say, by TCP offset, where each kept-out byte is.
        let mut frags = 0;
        tls.ctx.with_frags(0, stream.len() as u64, |f| {
            let at = f.start as usize;
            // The plaintext there, reconstructed: the buffer's bytes.
            assert!(f.buf.same(&buf));
            let record = at / (5000 + 22);
            let content_at = at - record * (5000 + 22) - HEADER + record * 5000;
            assert_eq!(
                buf.lock()[f.offset..f.offset + f.len],
                pdus[content_at..content_at + f.len]
            );
            frags += f.len;
        });
        // What stayed in the ring is the plaintext, headers, digests.
        assert_eq!(got[HEADER..HEADER + 24], pdus[..24]);
        assert_eq!(frags, 20_000);
        assert_eq!(stats.rx_tls_records, 5);
    }

    #[test]
    fn a_padded_record_stops_the_flow_inside_on_receive_and_is_not_vouched_for() {
        let i = info(TlsCipher::Aes256Gcm, 0);
        let data = vec![7u8; 9000];
        let pdu = c2h(CID, 0, &data, false, 24);
        // The PDU in two records, the first padded with three zeros.
        let cipher = Cipher::aes_256_gcm();
        let (a, b) = pdu.split_at(4000);
        let inner = [a, &[23, 0, 0, 0]].concat();
        let mut header = vec![23u8, 3, 3, 0, 0];
        header[3..5].copy_from_slice(&((inner.len() + TAG) as u16).to_be_bytes());
        let mut tag = [0u8; TAG];
        let sealed =
            encrypt_aead(cipher, &i.key, Some(&i.nonce(0)), &header, &inner, &mut tag).unwrap();
        let first = [header, sealed, tag.to_vec()].concat();
        let stream = [first.clone(), seal(&i, 1, b)].concat();
        let buf = IoBuf::new(data.len());
        let mut tls = socket(&i, &buf, 0);
        let inner_ctx = tls.inner.as_ref().unwrap().ctx().clone();
        let (stats, _, _) = run(&mut tls, &stream, 100_000);
        // The first record's data, and its padding too (taken for content
        // until the last byte said otherwise, then left to software to
        // write again), then no more.
        assert_eq!(stats.nic_placed_bytes, 4000 - 24 + 3);
        assert!(tls.inner.is_some(), "still there for its transmit digests");
        let mut hinted = false;
        inner_ctx.with_hints(0, 20_000, |_, _, h| hinted |= h.flags != HintFlags::NONE);
        assert!(!hinted, "its word on the record withdrawn");
        let mut said = Vec::new();
        tls.ctx.with_hints(0, first.len() as u64, |a, b, h| {
            if h.flags != HintFlags::NONE {
                said.push((a, b, h.flags));
            }
        });
        let body = (HEADER as u64, (first.len() - TAG) as u64, HintFlags::DECRYPTED);
        assert_eq!(said, vec![body], "decrypted, but the tag not vouched for");
    }

    /// 40,000 bytes of data for `CID`, byte `x` being `x * mul + add`, and
    /// the C2HData PDUs of `each` bytes that carry it.
    fn c2h_pdus(mul: u32, add: u32, each: usize) -> (Vec<u8>, Vec<u8>) {
        let data: Vec<u8> = (0..40_000u32).map(|x| (x * mul + add) as u8).collect();
        let pdus = data
            .chunks(each)
            .enumerate()
            .flat_map(|(k, c)| c2h(CID, (k * each) as u32, c, false, 24))
            .collect();
        (data, pdus)
    }

    /// `stream[range]` as one segment.
    fn feed(tls: &mut Tls, stream: &[u8], range: std::ops::Range<usize>, stats: &mut Stats) {
        let mut seg = stream[range.clone()].to_vec();
        let at = range.start as u64;
        let mut placed = Placed { zero_copy: true, base: at, ..Placed::default() };
        let mut env = Env { active: Caps::ALL, stats, placed: &mut placed };
        tls.rx_segment_mut(at, &mut seg, &mut env);
    }

    /// A guess its tag refutes says nothing of the layer inside, whatever
    /// the record looked like under the wrong number: the ULP's answer
    /// counts the layer inside anew, and it places again once its own PDU
    /// resync is confirmed. (It used to take the noise where the content
    /// type should be for a padded record, and stop the flow inside for
    /// the rest of the connection.)
    #[test]
    fn a_refuted_guess_leaves_the_flow_inside_to_place_again() {
        let i = info(TlsCipher::Aes128Gcm, 0);
        let (data, pdus) = c2h_pdus(7, 1, 1000);
        const CONTENT: usize = 2000;
        let stream = records(&i, &pdus, CONTENT);
        let record = HEADER + CONTENT + 1 + TAG;
        let start = |k: usize| k * record;
        let buf = IoBuf::new(data.len());
        let mut tls = socket(&i, &buf, 0);
        let inner = tls.inner.as_ref().unwrap().ctx().clone();
        let mut stats = Stats::default();
        feed(&mut tls, &stream, 0..1000, &mut stats);
        // Lost: the end of record 0 and the headers of records 1 and 2.
        feed(&mut tls, &stream, start(2) + 3..start(5) + 10, &mut stats);
        assert_eq!((stats.rx_tls_resync_guess, stats.rx_tls_resync_guess_ok), (1, 0));
        let asked = tls.ctx.take_resync_request().expect("a record resync request");
        assert_eq!(asked, start(4) as u64);
        let at = TlsStart { tcp: asked, inner: (4 * CONTENT) as u64 };
        tls.tls_resync(at, 4, &mut stats);
        // Records 6 on are decrypted; the flow inside finds its PDUs again.
        feed(&mut tls, &stream, start(5) + 10..start(12), &mut stats);
        let pdu = inner.take_resync_request().expect("the flow inside asks about a PDU");
        assert_eq!(pdu % 1028, 0, "at a PDU header");
        assert!(Socket::resync(&mut tls, pdu, &mut stats));
        let placed = stats.nic_placed_bytes;
        feed(&mut tls, &stream, start(12)..stream.len(), &mut stats);
        // From the first header after the confirmed one that had not gone
        // by: PDUs 24 to 39.
        assert_eq!(stats.nic_placed_bytes - placed, 16_000, "placing again");
        assert_eq!(buf.lock()[24_000..], data[24_000..]);
    }

    /// The record found after a lost header is numbered by a guess and
    /// held back from the layer inside until its tag proves it; then the
    /// layer inside takes it whole. Here it carries the next PDU's header:
    /// without it, the layer inside would have lost its place over the
    /// gap and asked the ULP; with it, it only steps over the lost
    /// record's content, inside a PDU's data, and places on.
    #[test]
    fn a_proven_guess_gives_the_layer_inside_the_record_it_held() {
        let i = info(TlsCipher::Aes128Gcm, 0);
        let (data, pdus) = c2h_pdus(11, 5, 10_000);
        const CONTENT: usize = 2000;
        let stream = records(&i, &pdus, CONTENT);
        let start = |k: usize| k * (HEADER + CONTENT + 1 + TAG);
        let buf = IoBuf::new(data.len());
        let mut tls = socket(&i, &buf, 0);
        let inner = tls.inner.as_ref().unwrap().ctx().clone();
        let mut stats = Stats::default();
        // Records 0 to 3 whole; record 4's header lost: its content (8,000
        // to 10,000, inside PDU 0's data) never reaches the layer inside.
        feed(&mut tls, &stream, 0..start(4) + 3, &mut stats);
        // Record 5 (10,000 to 12,000, PDU 1's header at 10,028) is found
        // with record 6's header after it, guessed, held, and proven.
        feed(&mut tls, &stream, start(4) + 500..start(6) + 10, &mut stats);
        assert_eq!((stats.rx_tls_resync_guess, stats.rx_tls_resync_guess_ok), (1, 1));
        feed(&mut tls, &stream, start(6) + 10..stream.len(), &mut stats);
        assert_eq!(inner.resync_request(), None, "the layer inside never lost its place");
        assert!(tls.inner.as_ref().unwrap().rx_synced());
        let got = buf.lock();
        assert_eq!(got[10_000..], data[10_000..], "PDUs 1 to 3 placed");
        assert_eq!(got[..7976], data[..7976], "PDU 0 before the gap");
        assert_eq!(got[9976..10_000], data[9976..10_000], "and after it, from the held record");
        assert!(got[7976..9976].iter().all(|&b| b == 0), "the lost record's content is the ULP's");
    }

    /// Record `seq` carrying `content`, padded with `pad` zeros, sealed.
    fn seal_padded(i: &TlsCryptoInfo, seq: u64, content: &[u8], pad: usize) -> Vec<u8> {
        let inner = [content, &[23], &vec![0; pad]].concat();
        let mut header = vec![23u8, 3, 3, 0, 0];
        header[3..5].copy_from_slice(&((inner.len() + TAG) as u16).to_be_bytes());
        let mut tag = [0u8; TAG];
        let (key, nonce) = (&i.key, i.nonce(seq));
        let sealed =
            encrypt_aead(Cipher::aes_128_gcm(), key, Some(&nonce), &header, &inner, &mut tag)
                .unwrap();
        [header, sealed, tag.to_vec()].concat()
    }

    /// A guessed record that is padded, then a loss past its end: the
    /// next guess rests on its numbering and on its count of content, so when a tag proves that one,
    /// the padding was real, the layer inside counted content that was
    /// not, and it is given nothing more.
    #[test]
    fn a_padded_record_under_a_guess_stops_the_flow_inside_when_proven() {
        let i = info(TlsCipher::Aes128Gcm, 0);
        let (data, pdus) = c2h_pdus(3, 1, 10_000);
        const CONTENT: usize = 2000;
        let mut spans = Vec::new();
        let mut stream = Vec::new();
        for (k, c) in pdus.chunks(CONTENT).enumerate() {
            let at = stream.len();
            match k {
                3 => stream.extend(seal_padded(&i, k as u64, c, 3)),
                _ => stream.extend(seal(&i, k as u64, c)),
            }
            spans.push(at);
        }
        let buf = IoBuf::new(data.len());
        let mut tls = socket(&i, &buf, 0);
        let inner = tls.inner.as_ref().unwrap().ctx().clone();
        let mut stats = Stats::default();
        // Record 1's header lost. Record 2's header is found alone and
        // guessed on, its end lost; the guess is carried to record 3,
        // padded, whose last byte is seen, but not all of its tag.
        feed(&mut tls, &stream, 0..spans[1] + 3, &mut stats);
        feed(&mut tls, &stream, spans[1] + 500..spans[2] + 1000, &mut stats);
        feed(&mut tls, &stream, spans[3]..spans[4] - 10, &mut stats);
        assert_eq!(stats.rx_tls_resync_guess, 1);
        // The rest of record 3's tag and record 4's header lost: record 5
        // is guessed on record 3's numbering, and proven.
        feed(&mut tls, &stream, spans[4] + 500..spans[7], &mut stats);
        assert_eq!((stats.rx_tls_resync_guess, stats.rx_tls_resync_guess_ok), (2, 1));
        let placed = stats.nic_placed_bytes;
        feed(&mut tls, &stream, spans[7]..stream.len(), &mut stats);
        assert_eq!(stats.nic_placed_bytes, placed, "nothing given to the flow inside");
        assert_eq!(inner.resync_request(), None, "nor did it hunt at false offsets");
    }
}
