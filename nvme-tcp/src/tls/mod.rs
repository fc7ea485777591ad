//! NVMe/TCP secure channels (TLS 1.3 with a pre-shared key, the NVMe/TCP
//! transport specification's section 3.6, from TP 8011).
//!
//! - `psk`: the configured PSK, its interchange format, and the identity
//!   and TLS PSK derived from it.
//! - `session`: a TLS 1.3 PSK session, sans-IO, over OpenSSL.
//! - `channel`: the TLS layer under one NVMe/TCP connection.
//! - `host`, `controller`: the bindings' transports with TLS under their
//!   queues ([`host::SecureTcp`], [`controller::SecureTcp`]); the queues
//!   themselves are the cleartext ones, unchanged.
//!
//! A NIC that offloads TLS takes the records over after the handshake
//! (`channel`), and the queue inside may then be offloaded within them
//! (placement and digests on the plaintext).

mod channel;
pub mod controller;
mod error;
mod ffi;
pub mod host;
mod psk;
pub(crate) mod record;
mod session;

pub use error::TlsError;
pub use psk::{ConfiguredPsk, Derivation, PskError, PskHash, PskLookup};
pub use session::TlsSession;
