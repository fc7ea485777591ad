//! Results as people read them and as programs read them (JSON).
//!
//! Reports show what was counted; they must never count or run anything.

use crate::size::format_size;
use crate::workload::{IoStats, WorkloadSpec};
use serde::Serialize;

/// One workload phase: what ran and what it did.
#[derive(Debug, Clone, Serialize)]
pub struct PhaseReport {
    pub rw: &'static str,
    pub bs: u32,
    pub qd: usize,
    pub queues: u16,
    pub verify: bool,
    #[serde(flatten)]
    pub stats: IoStats,
}

impl PhaseReport {
    pub fn new(spec: &WorkloadSpec, stats: IoStats, queues: u16, depth: usize) -> Self {
        Self {
            rw: spec.rw.name(),
            bs: spec.bs,
            qd: spec.qd.min(depth),
            queues,
            verify: spec.verify,
            stats,
        }
    }

    /// One short line: the direction and its rates.
    pub fn summary(&self) -> String {
        format!("{} {}", self.rw, rates(&self.stats))
    }

    /// A few lines, as fio prints them: rates, then latencies, then reads
    /// and writes apart when the phase mixed them.
    pub fn lines(&self) -> Vec<String> {
        let s = &self.stats;
        let mut head = format!(
            "{} bs={} queues={} qd={}: {}, {} in {:.2} s ({} I/Os",
            self.rw,
            format_size(u64::from(self.bs)),
            self.queues,
            self.qd,
            rates(s),
            human_bytes(s.bytes as f64),
            s.seconds,
            s.ios,
        );
        if self.verify && s.verified_bytes > 0 {
            head += &format!(", {} verified", human_bytes(s.verified_bytes as f64));
        }
        if self.verify && s.unchecked_bytes > 0 {
            head += &format!(
                ", {} read unchecked from blocks this run had not yet written",
                human_bytes(s.unchecked_bytes as f64)
            );
        }
        if s.errors > 0 || s.verify_failures > 0 {
            head += &format!(", {} errors, {} verify failures", s.errors, s.verify_failures);
        }
        let mut lines = vec![head + ")", format!("  lat: {}", latencies(s))];
        for (name, part) in [("read", &s.read), ("write", &s.write)] {
            if let Some(p) = part {
                lines.push(format!("  {name}: {}; lat {}", rates(p), latencies(p)));
            }
        }
        lines
    }
}

fn rates(s: &IoStats) -> String {
    format!("{} IOPS, {}/s", human_count(s.iops), human_bytes(s.bytes_per_sec))
}

fn latencies(s: &IoStats) -> String {
    format!(
        "mean {}, stdev {}, p50 {}, p90 {}, p99 {}, p99.9 {}, max {}",
        human_us(s.lat_mean_us),
        human_us(s.lat_stdev_us),
        human_us(s.lat_p50_us as f64),
        human_us(s.lat_p90_us as f64),
        human_us(s.lat_p99_us as f64),
        human_us(s.lat_p999_us as f64),
        human_us(s.lat_max_us as f64),
    )
}

/// Notes on what the controller granted short of what was asked: the
/// commands per queue (its queues hold `depth + 1` entries, one always
/// empty) and the I/O queues.
pub fn granted_notes(asked_qd: u16, depth: usize, asked_queues: u16, queues: u16) -> Vec<String> {
    let mut notes = Vec::new();
    if depth > 0 && depth < usize::from(asked_qd) {
        notes.push(format!(
            "note: the controller's queues hold {} commands; --qd {asked_qd} ran at {depth}",
            depth + 1
        ));
    }
    if queues > 0 && queues < asked_queues {
        notes.push(format!("note: the controller granted {queues} of {asked_queues} I/O queues"));
    }
    notes
}

/// Bytes in the binary units sizes are read in, to two decimals at most:
/// `16 MiB`, `1.5 MiB`, `1.57 GiB`.
pub fn human_bytes(n: f64) -> String {
    for (shift, unit) in [(40, "TiB"), (30, "GiB"), (20, "MiB"), (10, "KiB")] {
        let one = (1u64 << shift) as f64;
        if n >= one {
            // Two decimals at most, none that are zero: one way only.
            let v = format!("{:.2}", n / one);
            return format!("{} {unit}", v.trim_end_matches('0').trim_end_matches('.'));
        }
    }
    format!("{n:.0} B")
}

/// A count, shortened past ten thousand: `9876`, `12.9k`, `1.20M`.
pub fn human_count(n: f64) -> String {
    match n {
        n if n >= 1e6 => format!("{:.2}M", n / 1e6),
        n if n >= 1e4 => format!("{:.1}k", n / 1e3),
        n => format!("{n:.0}"),
    }
}

/// A time given in microseconds, in the unit that reads best.
pub fn human_us(us: f64) -> String {
    match us {
        us if us >= 1e6 => format!("{:.2} s", us / 1e6),
        us if us >= 1e3 => format!("{:.2} ms", us / 1e3),
        us => format!("{us:.0} us"),
    }
}

/// The offload counters of one side: Linux's ten, then the work the NIC
/// did and the work the upper layer still did.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct OffloadReport {
    /// Active offloads.
    pub caps: String,
    pub sk_add: u64,
    pub sk_add_fail: u64,
    pub sk_del: u64,
    pub ddp_setup: u64,
    pub ddp_setup_fail: u64,
    pub ddp_teardown: u64,
    pub drop: u64,
    pub resync: u64,
    pub packets: u64,
    pub bytes: u64,
    /// Data bytes the upper layer copied: out of the receive stream, and
    /// into the send stream.
    pub host_copy_bytes: u64,
    pub host_tx_copy_bytes: u64,
    /// Data bytes the upper layer digested (received and sent).
    pub host_crc_bytes: u64,
    /// Over TLS: bytes of records decrypted and encrypted in software.
    pub host_decrypt_bytes: u64,
    pub host_encrypt_bytes: u64,
    pub nic_placed_bytes: u64,
    pub nic_crc_bytes: u64,
    pub tx_crc_offloaded_bytes: u64,
    /// Data bytes the upper layer sent by reference, and payload bytes
    /// the NIC gathered for them (retransmissions too); transmit mappings
    /// made, and segments dropped for naming bytes of none.
    pub tx_zero_copy_bytes: u64,
    pub tx_gathered_bytes: u64,
    pub tx_setup: u64,
    pub tx_gather_refused: u64,
    /// iWARP: FPDUs the NIC cut tagged messages into and framed itself.
    pub tx_fpdus_framed: u64,
    pub fallback_pdus: u64,
    pub control_calls: u64,
    pub ddp_ios: u64,
    pub control_calls_per_io: f64,
    pub resync_confirmed: u64,
    pub oneshot_armed: u64,
    pub oneshot_freed: u64,
    pub tx_digest_restored: u64,
    /// Received data bytes, and those the NIC vouched the digest for.
    pub data_bytes: u64,
    pub hw_crc_bytes: u64,
    /// Received segments with a bad TCP checksum, withheld from the stack.
    pub rx_csum_bad: u64,
    /// Share of received data bytes the NIC placed.
    pub offload_share: f64,
    /// Times offload stopped and resumed (a lost header and its resync),
    /// and PDUs that passed meanwhile, on average.
    pub offload_gaps: u64,
    pub resync_latency_pdus: f64,
    /// TLS record offload: directions handed to the NIC; records and body
    /// bytes it decrypted and authenticated, tags that failed there;
    /// records and bytes it encrypted, retransmitted segments it
    /// encrypted again; record resyncs asked and confirmed.
    pub tls_dev_add: u64,
    pub nic_tls_rx_records: u64,
    pub nic_decrypt_bytes: u64,
    pub nic_tls_auth_fail: u64,
    pub nic_tls_tx_records: u64,
    pub nic_encrypt_bytes: u64,
    pub nic_tls_tx_again: u64,
    pub tls_resync: u64,
    pub tls_resync_confirmed: u64,
    /// Records found again by a guess of their number, and guesses right.
    pub tls_resync_guess: u64,
    pub tls_resync_guess_ok: u64,
    /// One-shot was asked for on a side that has no buffers to map (a
    /// controller): it runs without it.
    #[serde(skip)]
    pub oneshot_is_the_hosts: bool,
}

impl OffloadReport {
    pub fn new(
        caps: ulp_ddp::Caps,
        nic: ulp_ddp::Stats,
        ulp: nvme_of::UlpStats,
        tx: nvme_of::TxStats,
    ) -> Self {
        let per_io =
            if ulp.ddp_ios > 0 { ulp.control_calls as f64 / ulp.ddp_ios as f64 } else { 0.0 };
        Self {
            caps: caps.to_string(),
            sk_add: nic.sk_add,
            sk_add_fail: nic.sk_add_fail,
            sk_del: nic.sk_del,
            ddp_setup: nic.ddp_setup,
            ddp_setup_fail: nic.ddp_setup_fail,
            ddp_teardown: nic.ddp_teardown,
            drop: nic.drop,
            resync: nic.resync,
            packets: nic.packets,
            bytes: nic.bytes,
            host_copy_bytes: ulp.copy_bytes + tx.data_bytes,
            host_tx_copy_bytes: tx.data_bytes,
            host_crc_bytes: ulp.crc_bytes + tx.crc_bytes,
            host_decrypt_bytes: ulp.tls_decrypt_bytes,
            host_encrypt_bytes: tx.tls_encrypt_bytes,
            nic_placed_bytes: nic.nic_placed_bytes,
            nic_crc_bytes: nic.nic_crc_bytes,
            tx_crc_offloaded_bytes: nic.tx_crc_offloaded_bytes,
            tx_zero_copy_bytes: tx.zero_copy_bytes,
            tx_gathered_bytes: nic.tx_gathered_bytes,
            tx_setup: nic.tx_setup,
            tx_gather_refused: nic.tx_gather_refused,
            tx_fpdus_framed: nic.tx_fpdus_framed,
            fallback_pdus: ulp.fallback_pdus,
            control_calls: ulp.control_calls,
            ddp_ios: ulp.ddp_ios,
            control_calls_per_io: per_io,
            resync_confirmed: nic.resync_confirmed,
            oneshot_armed: nic.oneshot_armed,
            oneshot_freed: nic.oneshot_freed,
            tx_digest_restored: nic.tx_digest_restored,
            data_bytes: ulp.data_bytes,
            hw_crc_bytes: ulp.hw_crc_bytes,
            rx_csum_bad: nic.rx_csum_bad,
            offload_share: ulp.offload_share(),
            offload_gaps: ulp.offload_gaps,
            resync_latency_pdus: ulp.resync_latency_pdus(),
            tls_dev_add: nic.tls_dev_add,
            nic_tls_rx_records: nic.rx_tls_records,
            nic_decrypt_bytes: nic.rx_tls_decrypted_bytes,
            nic_tls_auth_fail: nic.rx_tls_auth_fail,
            nic_tls_tx_records: nic.tx_tls_records,
            nic_encrypt_bytes: nic.tx_tls_encrypted_bytes,
            nic_tls_tx_again: nic.tx_tls_ooo,
            tls_resync: nic.rx_tls_resync_req,
            tls_resync_confirmed: nic.rx_tls_resync_res_ok,
            tls_resync_guess: nic.rx_tls_resync_guess,
            tls_resync_guess_ok: nic.rx_tls_resync_guess_ok,
            oneshot_is_the_hosts: false,
        }
    }

    /// The counters of a controller's side: one-shot is the host's way of
    /// mapping its buffers, and a controller has none to map.
    pub fn controller(
        caps: ulp_ddp::Caps,
        nic: ulp_ddp::Stats,
        ulp: nvme_of::UlpStats,
        tx: nvme_of::TxStats,
    ) -> Self {
        Self {
            oneshot_is_the_hosts: caps.contains(ulp_ddp::Caps::ONESHOT),
            ..Self::new(caps.without(ulp_ddp::Caps::ONESHOT), nic, ulp, tx)
        }
    }

    /// A few lines for people.
    pub fn lines(&self, side: &str) -> Vec<String> {
        let mut software = format!(
            "software copied {} rx / {} tx and digested {}",
            human_bytes((self.host_copy_bytes - self.host_tx_copy_bytes) as f64),
            human_bytes(self.host_tx_copy_bytes as f64),
            human_bytes(self.host_crc_bytes as f64),
        );
        if self.host_decrypt_bytes + self.host_encrypt_bytes > 0 {
            software += &format!(
                ", decrypted {} rx / encrypted {} tx (TLS)",
                human_bytes(self.host_decrypt_bytes as f64),
                human_bytes(self.host_encrypt_bytes as f64),
            );
        }
        if self.caps == "none" {
            return vec![format!(
                "{side} offload [none]: the NIC offloads nothing; {software}; bad TCP checksum {}",
                self.rx_csum_bad
            )];
        }
        let placed = if self.data_bytes == 0 {
            "no data received".to_string()
        } else {
            format!("{:.1}% of received data placed", self.offload_share * 100.0)
        };
        let caps = match self.oneshot_is_the_hosts {
            true => format!("{}; one-shot maps a host's buffers, so not here", self.caps),
            false => self.caps.clone(),
        };
        let mut lines = vec![
            format!(
                "{side} offload [{caps}]: sk_add {} (fail {}), ddp_setup {} (fail {}), teardown {}, resync {} (confirmed {}), {} packets / {} offloaded, drop {} (bad TCP checksum {})",
                self.sk_add,
                self.sk_add_fail,
                self.ddp_setup,
                self.ddp_setup_fail,
                self.ddp_teardown,
                self.resync,
                self.resync_confirmed,
                self.packets,
                human_bytes(self.bytes as f64),
                self.drop,
                self.rx_csum_bad
            ),
            format!(
                "{side}   NIC placed {} and digested {} rx / {} tx, gathered {} tx{}; {software}; {} fallback PDUs; {:.2} control calls per mapped I/O",
                human_bytes(self.nic_placed_bytes as f64),
                human_bytes(self.nic_crc_bytes as f64),
                human_bytes(self.tx_crc_offloaded_bytes as f64),
                human_bytes(self.tx_gathered_bytes as f64),
                match self.tx_fpdus_framed {
                    0 => String::new(),
                    n => format!(" ({n} FPDUs framed)"),
                },
                self.fallback_pdus,
                self.control_calls_per_io
            ),
            format!(
                "{side}   {placed}; offload stopped {} times, for {:.1} PDUs on average",
                self.offload_gaps, self.resync_latency_pdus
            ),
        ];
        if self.tls_dev_add > 0 {
            lines.push(format!(
                "{side}   TLS: NIC decrypted {} records / {} rx ({} tags failed), encrypted {} records / {} tx ({} segments again); records found again by guess {} (right {}), by asking {} (confirmed {})",
                self.nic_tls_rx_records,
                human_bytes(self.nic_decrypt_bytes as f64),
                self.nic_tls_auth_fail,
                self.nic_tls_tx_records,
                human_bytes(self.nic_encrypt_bytes as f64),
                self.nic_tls_tx_again,
                self.tls_resync_guess,
                self.tls_resync_guess_ok,
                self.tls_resync,
                self.tls_resync_confirmed,
            ));
        }
        lines
    }
}

/// What the host's error recovery did: associations lost and the attempts
/// to make them again, new associations made, commands submitted again,
/// Aborts sent for commands that timed out.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct RecoveryReport {
    pub lost: u64,
    pub attempts: u64,
    pub reconnects: u64,
    pub retried: u64,
    pub aborts: u64,
}

impl From<nvme_of::host::Recovery> for RecoveryReport {
    fn from(r: nvme_of::host::Recovery) -> Self {
        Self {
            lost: r.lost,
            attempts: r.attempts,
            reconnects: r.reconnects,
            retried: r.retried,
            aborts: r.aborts,
        }
    }
}

impl RecoveryReport {
    pub fn line(&self) -> String {
        let n = |k: u64, one: &str, many: &str| format!("{k} {}", if k == 1 { one } else { many });
        let losses = match self.lost {
            0 => String::new(),
            lost => format!(
                "association lost {}, {} to reconnect; ",
                n(lost, "time", "times"),
                n(self.attempts, "attempt", "attempts"),
            ),
        };
        format!(
            "recovery: {losses}{}, {}, {}",
            n(self.reconnects, "reconnect", "reconnects"),
            n(self.retried, "command retried", "commands retried"),
            n(self.aborts, "abort", "aborts"),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_print_one_way() {
        assert_eq!(human_bytes((256u64 << 20) as f64), "256 MiB");
        // Not exact, but the same to two decimals: no "256.00 MiB" beside it.
        assert_eq!(human_bytes((256u64 << 20) as f64 + 5.0), "256 MiB");
        assert_eq!(human_bytes((3u64 << 19) as f64), "1.5 MiB");
        assert_eq!(human_bytes(1.57 * (1u64 << 30) as f64), "1.57 GiB");
        assert_eq!(human_bytes(1000.0), "1000 B");
    }

    #[test]
    fn recovery_counts_the_attempts_of_a_loss() {
        let calm = RecoveryReport::default();
        assert_eq!(calm.line(), "recovery: 0 reconnects, 0 commands retried, 0 aborts");
        let lost = RecoveryReport { lost: 1, attempts: 571, ..calm };
        assert_eq!(
            lost.line(),
            "recovery: association lost 1 time, 571 attempts to reconnect; 0 reconnects, 0 commands retried, 0 aborts"
        );
    }
}
