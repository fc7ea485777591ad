//! NVMe/TCP secure channels (TLS 1.3 with a pre-shared key, the NVMe/TCP
//! transport specification's section 3.6, from TP 8011).
//!
//! - `psk`: the configured PSK, its interchange format, and the identity
//!   and TLS PSK derived from it.
//! - `session`: a TLS 1.3 PSK session, sans-IO, over OpenSSL.

mod psk;
mod session;

pub use psk::{ConfiguredPsk, Derivation, PskError, PskHash};
pub use session::{PskLookup, TlsError, TlsSession};
