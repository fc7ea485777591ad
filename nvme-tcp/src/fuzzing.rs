//! Entry points for the fuzz targets (`fuzz/`) and for the test that replays
//! their corpus. Not part of the API.

use crate::wire::{Digests, Direction, Event, Framer, Framing, Pdu, PduRepr};

/// Feed arbitrary bytes to a framer and check what it reports.
///
/// Byte 0 picks the direction (bit 0), the digests (bits 2:1) and the PDA
/// (bits 7:3); byte 1 the size of the pieces the stream is cut into. For
/// every header the framer accepts, the header emitted back from its repr
/// must parse to the same repr, its data must add up to its length, and its
/// data digest must be reported exactly when the PDU has one.
pub fn framer(data: &[u8]) {
    let [mode, piece, stream @ ..] = data else { return };
    let accepts =
        if mode & 1 == 0 { Direction::ControllerToHost } else { Direction::HostToController };
    let framing = Framing { digests: Digests::from_bits(mode >> 1), pda: mode >> 3 };
    let mut f = Framer::new(accepts);
    f.set_framing(framing);
    let mut current: Option<(PduRepr, u64)> = None;
    for chunk in stream.chunks(usize::from(*piece).max(1)) {
        let mut at = 0;
        loop {
            let (n, event) = match f.next(&chunk[at..]) {
                Ok(step) => step,
                Err(e) => {
                    // Every refusal names a TermReq; none of this may panic.
                    let _ = (e.fes(), e.fei(), e.wants_term_req(), e.to_string());
                    assert!(f.header_bytes().len() <= crate::wire::MAX_HEADER_LEN + 4);
                    return;
                }
            };
            assert!(n <= chunk.len() - at);
            at += n;
            match event {
                None => break,
                Some(Event::Header(repr)) => {
                    assert!(current.is_none());
                    assert_eq!(repr.pdu_type().direction(), accepts);
                    let rx = if repr.pdu_type().has_digests() { framing } else { Framing::INITIAL };
                    let mut b = vec![0u8; repr.header_len()];
                    repr.emit_header(&mut b);
                    let again = Pdu::new_checked(&b[..]).and_then(|p| PduRepr::parse(&p, rx));
                    assert_eq!(again, Ok(repr), "accepted header must survive emit and parse");
                    current = Some((repr, 0));
                }
                Some(Event::Data { offset, bytes }) => {
                    let (repr, seen) = current.as_mut().expect("data only inside a PDU");
                    assert_eq!(u64::from(offset), *seen);
                    *seen += bytes.len() as u64;
                    assert!(*seen <= u64::from(repr.data_len));
                }
                Some(Event::End { data_digest }) => {
                    let (repr, seen) = current.take().expect("end only after a header");
                    assert_eq!(seen, u64::from(repr.data_len));
                    assert_eq!(data_digest.is_some(), repr.ddgst);
                    assert!(f.at_pdu_start());
                }
            }
        }
    }
}
