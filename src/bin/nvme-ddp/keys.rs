//! `nvme-ddp gen-dhchap-key` and `gen-tls-key`: the secrets `host` and
//! `controller` take, made as nvme-cli 2.13 makes them (same names, flags
//! and output), for a user without nvme-cli.
//!
//! It makes and prints keys; the formats and the cryptography are
//! `nvme-of`'s and `nvme-tcp`'s.

use anyhow::{Context, Result, bail};
use clap::Args;
use nvme_of::auth::{Hash, Secret};
use nvme_tcp::tls::{ConfiguredPsk, PskHash};
use zeroize::Zeroizing;

use crate::args::parse_nqn;
use crate::session::DEFAULT_HOSTNQN;

#[derive(Args, Debug)]
pub(crate) struct GenDhchapKeyArgs {
    /// The secret, in hex (default: random bytes).
    #[arg(short, long, value_name = "HEX")]
    secret: Option<String>,
    /// Bytes of secret: 32, 48 or 64 (default: the hash's length, or 32).
    #[arg(short = 'l', long, value_parser = ["32", "48", "64"])]
    key_length: Option<String>,
    /// The NQN the secret is transformed with (--hmac 1 to 3): the host's
    /// (default: /etc/nvme/hostnqn, else `host`'s default).
    #[arg(short, long, value_parser = parse_nqn)]
    nqn: Option<String>,
    /// Transform the secret with HMAC: 0 none, 1 SHA-256, 2 SHA-384, 3 SHA-512.
    #[arg(short = 'm', long, default_value_t = 0, value_parser = clap::value_parser!(u8).range(0..=3))]
    hmac: u8,
}

#[derive(Args, Debug)]
pub(crate) struct GenTlsKeyArgs {
    /// The PSK, in hex (default: random bytes).
    #[arg(short, long, value_name = "HEX")]
    secret: Option<String>,
    /// The hash the retained PSK is derived with: 1 SHA-256 (32 bytes),
    /// 2 SHA-384 (48 bytes).
    #[arg(short = 'm', long, default_value_t = 1, value_parser = clap::value_parser!(u8).range(1..=2))]
    hmac: u8,
    /// Host NQN (checked; the key holds no NQN: `host --hostnqn` and the
    /// controller's allow-list name it).
    #[arg(short = 'n', long, value_parser = parse_nqn)]
    hostnqn: Option<String>,
    /// Subsystem NQN (checked, as --hostnqn).
    #[arg(short = 'c', long, value_parser = parse_nqn)]
    subsysnqn: Option<String>,
    /// PSK identity version, 0 or 1 (checked; `host --tls-identity` picks
    /// the one offered).
    #[arg(short = 'I', long, default_value_t = 0, value_parser = clap::value_parser!(u8).range(0..=1))]
    identity: u8,
    /// nvme-cli's: insert the derived key into the kernel's keyring.
    #[arg(short, long)]
    insert: bool,
}

/// `gen-dhchap-key`: `DHHC-1:hh:<base64>:`. As nvme-cli 2.x does, a secret
/// for a hash is transformed here with the NQN (and again by whoever uses
/// it, as `hh` says).
pub(crate) fn gen_dhchap_key(a: GenDhchapKeyArgs) -> Result<()> {
    let hash = Hash::from_id(a.hmac);
    let len = match (hash, a.key_length.as_deref().map(str::parse::<usize>)) {
        (_, Some(Err(e))) => bail!("--key-length: {e}"),
        (None, Some(Ok(len))) => len,
        (None, None) => 32,
        (Some(h), None) => h.digest_len(),
        (Some(h), Some(Ok(len))) if len == h.digest_len() => len,
        (Some(h), Some(Ok(len))) => {
            let takes = h.digest_len();
            bail!("--key-length {len} does not fit --hmac {}: it takes {takes}", a.hmac)
        }
    };
    let secret = match a.secret.as_deref() {
        Some(hex) => Secret::new(&from_hex(hex, len)?, hash)?,
        None => Secret::generate(len, hash)?,
    };
    let key = match hash {
        None => secret,
        Some(h) => {
            let nqn = match a.nqn {
                Some(nqn) => nqn,
                None => default_hostnqn()?,
            };
            Secret::new(&secret.transformed(&nqn), Some(h))?
        }
    };
    println!("{}", key.to_interchange().as_str());
    Ok(())
}

/// `gen-tls-key`: the configured PSK in its interchange form,
/// `NVMeTLSkey-1:hh:<base64>:`.
pub(crate) fn gen_tls_key(a: GenTlsKeyArgs) -> Result<()> {
    if a.insert {
        bail!(
            "--insert puts the key in the kernel's keyring for Linux's host; nvme-ddp reads \
             it from --tls-key KEY|@FILE: run without --insert and give it that"
        );
    }
    let hash = if a.hmac == 1 { PskHash::Sha256 } else { PskHash::Sha384 };
    let key = match a.secret.as_deref() {
        None => ConfiguredPsk::generate(hash)?,
        Some(hex) => {
            let raw = from_hex(hex, if hash == PskHash::Sha256 { 32 } else { 48 })?;
            ConfiguredPsk::new(&raw, Some(hash)).context("the PSK does not fit its hash")?
        }
    };
    println!("{}", key.to_interchange().as_str());
    Ok(())
}

/// `--secret`: `len` bytes in hex, with or without `0x`.
fn from_hex(hex: &str, len: usize) -> Result<Zeroizing<Vec<u8>>> {
    let hex = hex.strip_prefix("0x").unwrap_or(hex);
    let raw = Zeroizing::new(hex::decode(hex).map_err(|_| {
        anyhow::anyhow!("--secret is not hex: give {len} bytes as {} hex digits", 2 * len)
    })?);
    if raw.len() != len {
        bail!("--secret is {} bytes; this key takes {len} ({} hex digits)", raw.len(), 2 * len);
    }
    Ok(raw)
}

/// The host NQN nvme-cli would use: /etc/nvme/hostnqn's, else `host`'s.
fn default_hostnqn() -> Result<String> {
    match std::fs::read_to_string("/etc/nvme/hostnqn") {
        Ok(s) => parse_nqn(s.trim()).map_err(|e| anyhow::anyhow!("/etc/nvme/hostnqn: {e}")),
        Err(_) => Ok(DEFAULT_HOSTNQN.into()),
    }
}
