//! NVMe/TCP secure channels (TLS 1.3 with a pre-shared key, the NVMe/TCP
//! transport specification's section 3.6, from TP 8011).
//!
//! - `session`: a TLS 1.3 PSK session, sans-IO, over OpenSSL.

mod session;

pub use session::{PskLookup, TlsError, TlsSession};
