//! Entry points for the `nic_rx`, `nic_mpa_rx` and `nic_tls_rx` fuzz targets (`fuzz/`)
//! and for the tests that replay their corpora. Not part of the API.

use crate::flow::iwarp::{Iwarp, StagMapping};
use crate::flow::nvme_tcp::NvmeTcp;
use crate::flow::{Env, Socket};
use crate::place::{Mapping, Placed};
use ulp_ddp::{
    Access, Caps, HintFlags, IoBuf, IwarpConfig, NvmeTcpConfig, Role, SgEntry, SkCtx, Stag, StagIo,
    Stats,
};

/// Bytes around and between mapped ranges that must never change.
const GUARD: usize = 64;
const CANARY: u8 = 0xee;
const TABLE: usize = 16;

struct Cursor<'a>(&'a [u8]);

impl Cursor<'_> {
    fn u8(&mut self) -> u8 {
        let (b, rest) = self.0.split_first().map_or((0, &[][..]), |(b, r)| (*b, r));
        self.0 = rest;
        b
    }

    fn u16(&mut self) -> u16 {
        u16::from_le_bytes([self.u8(), self.u8()])
    }
}

/// What a run did that a reader of the seam sees, written out when asked
/// for ([`journal`]): per operation, the ranges placed, whether the stack
/// got a copy the NIC changed, and a pending resync request; at the end,
/// every hint, fragment and upcall the socket holds, the counters, and
/// the bytes of the stream and of every buffer. Fuzzing asks for none.
struct Journal(Option<String>);

impl Journal {
    fn note(&mut self, line: impl FnOnce() -> String) {
        if let Some(j) = &mut self.0 {
            j.push_str(&line());
            j.push('\n');
        }
    }

    /// After operation `i`.
    fn op(&mut self, i: usize, placed: &Placed, ctx: &SkCtx) {
        self.note(|| {
            let ranges: Vec<_> = placed.ranges.iter().collect();
            let frags = placed
                .located
                .as_ref()
                .map(|v| v.iter().map(|f| (f.start, f.offset, f.len)).collect::<Vec<_>>());
            format!(
                "op {i}: placed {ranges:?} rewritten {} frags {frags:?} resync {:?}",
                placed.rewritten,
                ctx.resync_request()
            )
        });
    }

    /// At the end: what the socket holds, the counters and the bytes.
    fn end(&mut self, ctx: &SkCtx, stats: &Stats, stream: &[u8], guarded: &[Guarded]) {
        if self.0.is_none() {
            return;
        }
        let mut lines = Vec::new();
        ctx.with_hints(0, u64::MAX, |a, b, h| {
            if h.flags != HintFlags::NONE || h.run.is_some() {
                lines.push(format!("hint {a}..{b} {:?} {:?}", h.flags, h.run));
            }
        });
        ctx.with_frags(0, u64::MAX, |f| {
            lines.push(format!("frag {} {} {}", f.start, f.offset, f.len));
        });
        lines.push(format!("teardown done {:?}", ctx.take_teardown_done()));
        while let Some(f) = ctx.take_freed(u64::MAX) {
            lines.push(format!("freed {} {}", f.offset, f.tag));
        }
        lines.push(format!("{stats:?}"));
        lines.push(format!("stream {:016x}", fnv(stream)));
        for (i, g) in guarded.iter().enumerate() {
            lines.push(format!("buffer {i} {:016x}", fnv(&g.buf.lock())));
        }
        for l in lines {
            self.note(|| l);
        }
    }
}

/// FNV-1a: a stable fingerprint of bytes, the same on every machine.
fn fnv(bytes: &[u8]) -> u64 {
    bytes
        .iter()
        .fold(0xcbf2_9ce4_8422_2325, |h, &b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3))
}

/// What [`rx`], [`mpa_rx`] or [`tls_rx`] (by `target`: `nic_rx`,
/// `nic_mpa_rx`, `nic_tls_rx`) does with `data`, as text: two runs of
/// the same input, at two commits, behave alike if their journals are
/// equal.
pub fn journal(target: &str, data: &[u8]) -> String {
    let mut j = Journal(Some(String::new()));
    match target {
        "nic_rx" => rx_journal(data, &mut j),
        "nic_mpa_rx" => mpa_rx_journal(data, &mut j),
        "nic_tls_rx" => tls_rx_journal(data, &mut j),
        _ => panic!("no NIC fuzz target {target:?}"),
    };
    j.0.unwrap_or_default()
}

/// One mapping's buffer, mapped where `ranges` say, canaries elsewhere.
struct Guarded {
    buf: IoBuf,
    ranges: Vec<(usize, usize)>,
}

impl Guarded {
    fn untouched_outside(&self) -> bool {
        let g = self.buf.lock();
        let mut at = 0;
        for &(off, len) in &self.ranges {
            if g[at..off].iter().any(|&b| b != CANARY) {
                return false;
            }
            at = off + len;
        }
        g[at..].iter().all(|&b| b == CANARY)
    }
}

/// Run a flow's receive and transmit paths over arbitrary input.
///
/// Byte 0: role (bit 0), header and data digests (bits 1, 2), active
/// offloads (bits 3 to 6). Byte 1: how many mappings; four bytes each: tag,
/// length (u16), flags (one-shot, live, split in two entries). Then a count
/// of operations, five bytes each: kind, then two u16 `a` and `b`: receive
/// stream bytes `[a, a + b)` (kinds 0 and 1: in order, out of order,
/// overlapping or again, as the input says), confirm a resync at `a`
/// (kind 2), or transmit `[a, a + b)` (kind 3). The rest is the stream.
///
/// After every operation no byte outside a mapped range has changed, and
/// the ranges reported as placed lie inside the segment, in order.
/// Returns the device's counters.
pub fn rx(data: &[u8]) -> Stats {
    rx_journal(data, &mut Journal(None))
}

fn rx_journal(data: &[u8], j: &mut Journal) -> Stats {
    let mut c = Cursor(data);
    let mode = c.u8();
    let role = if mode & 1 == 0 { Role::Host } else { Role::Controller };
    let dgst = (mode >> 1) & 3;
    let active = Caps::from_bits(u32::from(mode >> 3));
    let config = NvmeTcpConfig {
        role,
        pfv: 0,
        cpda: 0,
        hpda: 0,
        dgst,
        queue_size: TABLE as u32,
        rx_start: 0,
        tx_start: 0,
    };
    let mut flow = NvmeTcp::flow(config, 0, 0, active.contains(Caps::CRC_TX), TABLE);
    let guarded = map(&mut c, &mut flow);
    let ops: Vec<(u8, u16, u16)> = (0..c.u8()).map(|_| (c.u8(), c.u16(), c.u16())).collect();
    let mut stream = c.0.to_vec();
    let mut stats = Stats::default();
    for (n, (kind, a, b)) in ops.into_iter().enumerate() {
        let start = usize::from(a).min(stream.len());
        let end = (start + usize::from(b)).min(stream.len());
        let mut placed = Placed { zero_copy: true, base: start as u64, ..Placed::default() };
        let mut env = Env { active, stats: &mut stats, placed: &mut placed };
        match kind % 4 {
            0 | 1 => flow.rx_segment(start as u64, &stream[start..end], &mut env),
            2 => {
                flow.resync(u64::from(a), env.stats);
            }
            _ => {
                flow.tx_segment(start as u64, &mut stream[start..end], &mut env);
            }
        }
        check(&placed, end - start, &guarded);
        j.op(n, &placed, &flow.ctx);
    }
    j.end(&flow.ctx, &stats, &stream, &guarded);
    stats
}

/// Run an iWARP flow's receive and transmit paths over arbitrary input.
///
/// Byte 0: MPA CRCs (bit 0), one-shot opcodes (bit 1), active offloads
/// (bits 2 to 5), markers received (bit 6) and sent (bit 7). Byte 1: how
/// many buffers; six bytes each: index, key, length (u16), rights (bits 0
/// to 2), flags (bit 0: advertised, armed by a Send at the offset
/// `length` says; bit 1: split in two entries; bit 2: not an STag but the
/// posted receive for the Send whose MSN is `index`, always writable). Then
/// a count of operations, five bytes each: kind, then two u16 `a` and
/// `b`: receive `[a, a + b)` (kinds 0 and 1), confirm a resync at `a`
/// (2), transmit `[a, a + b)` (3), or invalidate the STag at position
/// `a` (4). The rest is the stream.
///
/// After every operation no byte outside an STag's range has changed,
/// nor any byte of an STag that grants no write, and the ranges reported
/// as placed lie inside the segment, in order. Returns the counters.
pub fn mpa_rx(data: &[u8]) -> Stats {
    mpa_rx_journal(data, &mut Journal(None))
}

fn mpa_rx_journal(data: &[u8], j: &mut Journal) -> Stats {
    let mut c = Cursor(data);
    let mode = c.u8();
    let active = Caps::from_bits(u32::from(mode >> 2) & 0xf);
    let config = IwarpConfig {
        crc: mode & 1 != 0,
        oneshot_opcodes: mode & 2 != 0,
        rx_start: 0,
        tx_start: 0,
        rx_markers: mode & 0x40 != 0,
        tx_markers: mode & 0x80 != 0,
    };
    let mut flow = Iwarp::flow(
        config,
        0,
        0,
        config.crc && active.contains(Caps::CRC_TX),
        active.contains(Caps::ONESHOT),
    );
    let mut guarded = Vec::new();
    let mut stags = Vec::new();
    for _ in 0..c.u8() % 9 {
        let (index, key) = (u32::from(c.u8()) + 1, c.u8());
        let (len, rights, flags) = (usize::from(c.u16() % 8192) + 1, c.u8(), c.u8());
        let ranges = if flags & 2 != 0 && len > 1 {
            vec![(GUARD, len / 2), (2 * GUARD + len / 2, len - len / 2)]
        } else {
            vec![(GUARD, len)]
        };
        let size = ranges.last().map_or(0, |&(o, l)| o + l) + GUARD;
        let buf = IoBuf::from_vec(vec![CANARY; size]);
        let sgl =
            ranges.iter().map(|&(o, l)| SgEntry { buf: buf.clone(), offset: o, len: l }).collect();
        let mut access = Access::default();
        for (bit, right) in
            [(1, Access::LOCAL_WRITE), (2, Access::REMOTE_READ), (4, Access::REMOTE_WRITE)]
        {
            if rights & bit != 0 {
                access = access | right;
            }
        }
        let stag = Stag::new(index, key);
        let recv = flags & 4 != 0;
        let arm_at = (flags & 1 != 0).then_some(len as u64);
        if recv {
            flow.proto.insert_recv(index, sgl);
        } else if !flow.proto.stag_busy(stag)
            && let Some(m) =
                StagMapping::new(StagIo { stag, sgl, base: u64::from(key) << 8, access }, arm_at)
        {
            flow.proto.insert_stag(m, arm_at);
            stags.push(stag);
        }
        let writable =
            recv || access.contains(Access::LOCAL_WRITE) || access.contains(Access::REMOTE_WRITE);
        let ranges = if writable { ranges } else { Vec::new() };
        guarded.push(Guarded { buf, ranges });
    }
    let ops: Vec<(u8, u16, u16)> = (0..c.u8()).map(|_| (c.u8(), c.u16(), c.u16())).collect();
    let mut stream = c.0.to_vec();
    let mut stats = Stats::default();
    for (n, (kind, a, b)) in ops.into_iter().enumerate() {
        let start = usize::from(a).min(stream.len());
        let end = (start + usize::from(b)).min(stream.len());
        let mut placed = Placed { zero_copy: true, base: start as u64, ..Placed::default() };
        let mut env = Env { active, stats: &mut stats, placed: &mut placed };
        match kind % 5 {
            0 | 1 => flow.rx_segment(start as u64, &stream[start..end], &mut env),
            2 => {
                flow.resync(u64::from(a), env.stats);
            }
            3 => {
                flow.tx_segment(start as u64, &mut stream[start..end], &mut env);
            }
            _ => {
                if let Some(&s) = stags.get(usize::from(a) % stags.len().max(1)) {
                    flow.proto.remove_stag(s);
                }
            }
        }
        let mut last = 0;
        for r in placed.ranges.iter() {
            assert!(last <= r.start && r.start < r.end && r.end <= end - start, "{r:?}");
            last = r.end;
        }
        for g in &guarded {
            assert!(g.untouched_outside(), "a byte was written outside a writable STag");
        }
        j.op(n, &placed, &flow.ctx);
    }
    j.end(&flow.ctx, &stats, &stream, &guarded);
    stats
}

/// Run a TLS socket's receive path, with an NVMe/TCP host flow inside,
/// over records sealed from arbitrary input and cut and corrupted as the
/// input says.
///
/// Byte 0: the cipher (bit 0: AES-256-GCM), active offloads (bits 1 to
/// 7). Byte 1 seeds the key, byte 2 is the first record's sequence
/// number. Byte 3: how many mappings, four bytes each as for [`rx`]. Then
/// how many records, two bytes each: a content length; their content is
/// the input's tail, sealed in order. Then a count of operations, five
/// bytes each: kind, then two u16 `a` and `b`: receive stream bytes
/// `[a, a + b)` (kinds 0 and 1), confirm a record resync at `a` with
/// sequence number `b` (2; the offset inside is the true one if a record
/// starts at `a`), confirm a PDU resync at
/// `a` (3), or flip bits `b` of byte `a` of the records (4; done before
/// anything is received).
///
/// After every operation no byte outside a mapped range has changed, and
/// the placed ranges lie inside the segment, in order. At the end, every
/// record the NIC vouched for (its body hinted `DECRYPTED`, its tag
/// `TAG_OK`)
/// authenticates, and the plaintext the stack got of it is the record's.
pub fn tls_rx(data: &[u8]) -> Stats {
    tls_rx_journal(data, &mut Journal(None))
}

fn tls_rx_journal(data: &[u8], j: &mut Journal) -> Stats {
    use crate::flow::tls::Tls;
    use openssl::symm::{Cipher, encrypt_aead};
    use ulp_ddp::tls::record::{HEADER, TAG};
    use ulp_ddp::{TlsCipher, TlsCryptoInfo, TlsDirection, TlsStart};

    let mut c = Cursor(data);
    let mode = c.u8();
    let cipher = if mode & 1 == 0 { TlsCipher::Aes128Gcm } else { TlsCipher::Aes256Gcm };
    let active = Caps::from_bits(u32::from(mode >> 1));
    let seed = c.u8();
    let info = TlsCryptoInfo {
        cipher,
        key: zeroize::Zeroizing::new((0..cipher.key_len() as u8).map(|i| i ^ seed).collect()),
        salt: [seed, 1, 2, 3],
        iv: [4, 5, 6, 7, 8, 9, 10, seed],
        rec_seq: u64::from(c.u8()),
    };
    let mut flow = NvmeTcp::host_flow(TABLE as u32, 0);
    let guarded = map(&mut c, &mut flow);
    let sizes: Vec<usize> = (0..c.u8() % 32).map(|_| usize::from(c.u16() % 2048).max(1)).collect();
    let ops: Vec<(u8, u16, u16)> = (0..c.u8()).map(|_| (c.u8(), c.u16(), c.u16())).collect();
    let source = c.0;
    // The records, sealed by OpenSSL's AEAD (not the NIC's code).
    let evp = match cipher {
        TlsCipher::Aes128Gcm => Cipher::aes_128_gcm(),
        TlsCipher::Aes256Gcm => Cipher::aes_256_gcm(),
    };
    let mut stream = Vec::new();
    let mut records = Vec::new();
    let (mut taken, mut inner_at) = (0, 0u64);
    for (k, &n) in sizes.iter().enumerate() {
        let content: Vec<u8> = (0..n)
            .map(|i| source.get((taken + i) % source.len().max(1)).copied().unwrap_or(0))
            .collect();
        taken += n;
        let mut inner = content.clone();
        inner.push(23);
        let mut header = vec![23, 3, 3];
        header.extend_from_slice(&((inner.len() + TAG) as u16).to_be_bytes());
        let seq = info.rec_seq + k as u64;
        let mut tag = [0u8; TAG];
        let Ok(sealed) =
            encrypt_aead(evp, &info.key, Some(&info.nonce(seq)), &header, &inner, &mut tag)
        else {
            return Stats::default();
        };
        records.push((stream.len(), seq, header.clone(), content, inner_at));
        inner_at += n as u64;
        stream.extend(header);
        stream.extend(sealed);
        stream.extend(tag);
    }
    for &(kind, a, b) in &ops {
        if kind % 5 == 4 && !stream.is_empty() {
            let at = usize::from(a) % stream.len();
            stream[at] ^= (b as u8) | 1;
        }
    }
    let mut tls = Tls::new(0, 0, 0);
    if tls.add(TlsDirection::Rx, &info, TlsStart { tcp: 0, inner: 0 }).is_err() {
        return Stats::default();
    }
    tls.inner = Some(Box::new(flow));
    let mut stats = Stats::default();
    // What the stack holds: each byte as it first came, unless kept out.
    let mut view: Vec<Option<u8>> = vec![None; stream.len()];
    let mut kept_out = vec![false; stream.len()];
    for (n, (kind, a, b)) in ops.into_iter().enumerate() {
        let start = usize::from(a).min(stream.len());
        let end = (start + usize::from(b)).min(stream.len());
        let mut placed =
            Placed { zero_copy: true, base: start as u64, may_rewrite: true, ..Placed::default() };
        let mut env = Env { active, stats: &mut stats, placed: &mut placed };
        match kind % 5 {
            0 | 1 => {
                let mut seg = stream[start..end].to_vec();
                tls.rx_segment_mut(start as u64, &mut seg, &mut env);
                for r in placed.ranges.iter() {
                    kept_out[start + r.start..start + r.end].fill(true);
                }
                for (i, &byte) in seg.iter().enumerate() {
                    view[start + i].get_or_insert(byte);
                }
            }
            2 => {
                // The ULP answers as software does: only where a record
                // starts, with its number and the offset inside there.
                if let Some(r) = records.iter().find(|r| r.0 == usize::from(a)) {
                    tls.tls_resync(TlsStart { tcp: u64::from(a), inner: r.4 }, r.1, env.stats)
                }
            }
            3 => {
                tls.resync(u64::from(a), env.stats);
            }
            _ => {}
        }
        check(&placed, end - start, &guarded);
        j.op(n, &placed, &tls.ctx);
    }
    let seen: Vec<u8> = view
        .iter()
        .zip(&kept_out)
        .flat_map(|(v, &k)| [v.is_some() as u8, v.unwrap_or(0), k as u8])
        .collect();
    j.end(&tls.ctx, &stats, &seen, &guarded);
    // Whatever the NIC did, software gets every record back as it came:
    // headers and tags untouched, and each body byte either untouched or
    // hinted decrypted under the record's own number or the guess noted
    // at its body, which software encrypts back under (as `nvme_tcp::tls`
    // does). That holds where software finds the records the stream was
    // built of; a flipped header frames them otherwise, and a peer that
    // frames its records so only fails its own connection.
    let mut hinted = vec![false; stream.len()];
    tls.ctx.with_hints(0, stream.len() as u64, |a, b, h| {
        if h.flags.contains(HintFlags::DECRYPTED) {
            hinted[a as usize..b as usize].fill(true);
        }
    });
    let ctr = match cipher {
        TlsCipher::Aes128Gcm => Cipher::aes_128_ctr(),
        TlsCipher::Aes256Gcm => Cipher::aes_256_ctr(),
    };
    let framed_as_built =
        records.iter().all(|(at, _, header, _, _)| stream[*at..*at + HEADER] == header[..]);
    for (at, seq, _, content, _) in records.iter().filter(|_| framed_as_built) {
        let (at, body, end) = (*at, at + HEADER, at + HEADER + content.len() + 1 + TAG);
        let guess = tls.ctx.take_guess(body as u64);
        j.note(|| format!("guess {body} {guess:?}"));
        let nic_seq = guess.unwrap_or(*seq);
        // GCM's keystream: counter blocks from the nonce and 2 on.
        let iv = [&info.nonce(nic_seq)[..], &2u32.to_be_bytes()].concat();
        let zeros = vec![0u8; end - TAG - body];
        let Ok(keystream) = openssl::symm::encrypt(ctr, &info.key, Some(&iv), &zeros) else {
            break;
        };
        for i in at..end {
            let (Some(got), false) = (view[i], kept_out[i]) else { continue };
            let back = match i >= body && i < end - TAG && hinted[i] {
                true => got ^ keystream[i - body],
                false => got,
            };
            assert_eq!(back, stream[i], "byte {i} of the record at {at}: software cannot undo it");
        }
    }
    for (at, seq, header, content, _) in &records {
        let (body, end) = (at + HEADER, at + HEADER + content.len() + 1 + TAG);
        let mut vouched = true;
        let mut covered = body as u64;
        let tag_at = (end - TAG) as u64;
        tls.ctx.with_hints(body as u64, end as u64, |a, b, h| {
            let want = if a < tag_at { HintFlags::DECRYPTED } else { HintFlags::TAG_OK };
            vouched &= h.flags == want && a == covered && (b <= tag_at || a >= tag_at);
            covered = b;
        });
        if !vouched || covered != end as u64 {
            continue;
        }
        let ciphertext = &stream[body..end - TAG];
        let tag = &stream[end - TAG..end];
        let opened = openssl::symm::decrypt_aead(
            evp,
            &info.key,
            Some(&info.nonce(*seq)),
            header,
            ciphertext,
            tag,
        );
        let Ok(plain) = opened else { panic!("a record vouched for that does not authenticate") };
        assert_eq!(plain[..content.len()], content[..]);
        for (i, &p) in plain.iter().enumerate() {
            if !kept_out[body + i]
                && let Some(got) = view[body + i]
            {
                assert_eq!(got, p, "the stack got other plaintext than the record's");
            }
        }
    }
    stats
}

/// After an operation on a segment of `len` bytes: the ranges reported
/// placed lie inside it, in order, and no byte outside a mapping changed.
fn check(placed: &Placed, len: usize, guarded: &[Guarded]) {
    let mut last = 0;
    for r in placed.ranges.iter() {
        assert!(last <= r.start && r.start < r.end && r.end <= len, "{r:?}");
        last = r.end;
    }
    for g in guarded {
        assert!(g.untouched_outside(), "a byte was written outside a mapping");
    }
}

/// Map up to eight guarded buffers into `flow`'s table as the input says
/// (four bytes each: tag, length, flags).
fn map(c: &mut Cursor, flow: &mut crate::flow::Flow<NvmeTcp>) -> Vec<Guarded> {
    let mut guarded = Vec::new();
    for _ in 0..c.u8() % 9 {
        let (tag, len, flags) = (c.u8(), usize::from(c.u16() % 8192) + 1, c.u8());
        let ranges = if flags & 4 != 0 && len > 1 {
            vec![(GUARD, len / 2), (2 * GUARD + len / 2, len - len / 2)]
        } else {
            vec![(GUARD, len)]
        };
        let size = ranges.last().map_or(0, |&(o, l)| o + l) + GUARD;
        let buf = IoBuf::from_vec(vec![CANARY; size]);
        let entries =
            ranges.iter().map(|&(offset, len)| SgEntry { buf: buf.clone(), offset, len }).collect();
        if let Some(slot) = flow.proto.slot(u16::from(tag) % TABLE as u16) {
            let oneshot = flags & 1 != 0;
            *slot = Some(Mapping { entries, len, oneshot, live: !oneshot || flags & 2 != 0 });
        }
        guarded.push(Guarded { buf, ranges });
    }
    guarded
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The inputs the corpus grew from: in order, reordered, retransmitted.
    pub(crate) fn seeds() -> Vec<Vec<u8>> {
        // C2HData PDUs for tag 3 without header digest, with data digest.
        let c2h = |datao, data: &[u8]| crate::pdu::tests::c2h(3, datao, data, false, 24);
        let mut stream = c2h(0, &[0x5a; 1000]);
        stream.extend(c2h(1000, &[0xa5; 500]));
        // Host, data digests, every offload; tag 3 mapped 1500 bytes, split.
        let head = [0x04 | (0xf << 3), 1, 3, 0xdc, 0x05, 0x02 | 0x04];
        let n = stream.len() as u16;
        let plans: [&[(u8, u16, u16)]; 3] = [
            &[(0, 0, n)],
            &[(0, 0, 600), (0, 900, 700), (0, 600, 300), (0, 1200, n)],
            &[(0, 0, 500), (0, 0, 500), (2, 0, 0), (0, 500, n), (3, 0, n)],
        ];
        plans.iter().map(|ops| input(&head, ops, &stream)).collect()
    }

    /// A fuzz input: `head`, the operations (count, then kind and two
    /// u16 each), then `tail`.
    fn input(head: &[u8], ops: &[(u8, u16, u16)], tail: &[u8]) -> Vec<u8> {
        let mut v = head.to_vec();
        v.push(ops.len() as u8);
        for &(k, a, b) in ops {
            v.push(k);
            v.extend_from_slice(&a.to_le_bytes());
            v.extend_from_slice(&b.to_le_bytes());
        }
        v.extend_from_slice(tail);
        v
    }

    /// The inputs the `nic_tls_rx` corpus grew from: two C2HData PDUs in
    /// six records, in order, reordered (a header lost, records found
    /// again and confirmed), and with a flipped bit in the second record.
    pub(crate) fn tls_seeds() -> Vec<Vec<u8>> {
        let c2h = |datao, data: &[u8]| crate::pdu::tests::c2h(3, datao, data, false, 24);
        let mut content = c2h(0, &[0x5a; 1000]);
        content.extend(c2h(1000, &[0xa5; 500]));
        let sizes = [300u16, 300, 300, 300, 300, content.len() as u16 - 1500];
        // Every offload, AES-128; key seed 9, records from 5; tag 3
        // mapped 1500 bytes, split.
        let mut head = vec![0x7f << 1, 9, 5, 1, 3, 0xdc, 0x05, 0x04, sizes.len() as u8];
        for n in sizes {
            head.extend_from_slice(&n.to_le_bytes());
        }
        let n = content.len() as u16 + 6 * 22;
        let plans: [&[(u8, u16, u16)]; 3] = [
            &[(0, 0, 1000), (0, 1000, n)],
            &[(0, 0, 200), (0, 330, 700), (2, 644, 7), (0, 200, 130), (0, 1030, n)],
            &[(4, 400, 1), (0, 0, n)],
        ];
        plans.iter().map(|ops| input(&head, ops, &content)).collect()
    }

    #[test]
    fn tls_seeds_decrypt_place_and_vouch_only_for_what_authenticates() {
        let got: Vec<(u64, u64, u64)> = tls_seeds()
            .iter()
            .map(|s| {
                let st = tls_rx(s);
                (st.rx_tls_records, st.rx_tls_auth_fail, st.nic_placed_bytes)
            })
            .collect();
        // In order: six records, all 1500 data bytes placed. Reordered:
        // the second record's header was lost; the NIC finds the third by
        // the fourth behind it, guesses its number (one record fits
        // between) and its tag proves it: the third to the sixth are the
        // NIC's. A flipped bit: that record fails its tag.
        assert_eq!(got[0], (6, 0, 1500));
        assert_eq!((got[1].0, got[1].1), (4, 0));
        assert_eq!((got[2].0, got[2].1), (5, 1));
    }

    #[test]
    fn seeds_place_and_stay_inside_their_mappings() {
        let placed: Vec<u64> = seeds().iter().map(|s| rx(s).nic_placed_bytes).collect();
        // In order, everything is placed; reordered, the 300 data bytes
        // that came late are left to software (the gap lay inside data, so
        // the tracker skipped it by length and went on); sent twice, once.
        assert_eq!(placed, [1500, 1200, 1500]);
    }

    /// The inputs the `nic_mpa_rx` corpus grew from: a Write in two FPDUs
    /// and a Send with Invalidate of its STag, in order, reordered, with a
    /// resync, and sent; then with markers, in order and reordered.
    pub(crate) fn mpa_seeds() -> Vec<Vec<u8>> {
        use crate::mpa::tests::{fpdu, with_markers};
        let stag = Stag::new(3, 7);
        let base = 7u64 << 8;
        let mut fpdus = Vec::new();
        for (to, last) in [(0u64, false), (700, true)] {
            let mut h = vec![0x81 | if last { 0x40 } else { 0 }, 0x40];
            h.extend_from_slice(&stag.0.to_be_bytes());
            h.extend_from_slice(&(base + to).to_be_bytes());
            fpdus.push(fpdu(&h, &[0x5a; 700]));
        }
        let mut h = vec![0x41, 0x44];
        for v in [stag.0, 0, 1, 0] {
            h.extend_from_slice(&v.to_be_bytes());
        }
        fpdus.push(fpdu(&h, b"done"));
        let (plain, marked) = (fpdus.concat(), with_markers(&fpdus));
        // CRCs, every offload (and markers received); STag index 3 key 7,
        // 1400 bytes, remote write, split in two.
        let head = |markers: bool, recv: bool| {
            let mode = 0x01 | (0xf << 2) | if markers { 0x40 } else { 0 };
            let mut h = vec![mode, 1 + u8::from(recv), 2, 7, 0x78, 0x05, 0x04, 0x02];
            if recv {
                // A 16-byte receive for the Send with MSN 1.
                h.extend_from_slice(&[0, 0, 16, 0, 0, 0x04]);
            }
            h
        };
        let in_order = |n: usize| vec![(0u8, 0u16, n as u16)];
        let reordered =
            |n: usize| vec![(0, 0, 600), (0, 900, 700), (0, 600, 300), (0, 1200, n as u16)];
        let n = plain.len();
        let plans = [
            (false, in_order(n)),
            (false, reordered(n)),
            (
                false,
                vec![
                    (0, 0, 500),
                    (0, 0, 500),
                    (2, 0, 0),
                    (0, 500, n as u16),
                    (3, 0, n as u16),
                    (4, 0, 0),
                ],
            ),
            (true, in_order(marked.len())),
            (true, reordered(marked.len())),
        ];
        let mut seeds: Vec<_> = plans
            .iter()
            .map(|(markers, ops)| {
                input(&head(*markers, false), ops, if *markers { &marked } else { &plain })
            })
            .collect();
        // In order, with a receive posted for the Send.
        seeds.push(input(&head(false, true), &[(0, 0, n as u16)], &plain));
        seeds
    }

    #[test]
    fn mpa_seeds_place_free_and_stay_inside_their_stags() {
        let got: Vec<(u64, u64)> = mpa_seeds()
            .iter()
            .map(|s| {
                let st = mpa_rx(s);
                (st.nic_placed_bytes, st.stag_remote_invalidate)
            })
            .collect();
        // In order: all placed, then the Send with Invalidate frees the
        // STag. Reordered: the hole at 600 covers the first FPDU's CRC and
        // the second's header, so the NIC loses its place after 584 bytes
        // and hunts; the stream ends before a chain can be confirmed, and
        // the close is left to software. Sent twice and resynced: all.
        // With markers the same, less the marker at 512: the stream ends
        // before another marker could show the way.
        // The Send's four bytes land in the receive posted for it.
        assert_eq!(got, [(1400, 1), (584, 0), (1400, 1), (1400, 1), (576, 0), (1404, 1)]);
    }
}
