//! How a TLS session fails: in its handshake, in a record, or in setting
//! it up. Closing the connection is the only answer to any of them.

/// Why a session failed. Closing the connection is the only answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TlsError {
    #[error("TLS handshake failed: {0}")]
    Handshake(String),
    #[error("TLS record rejected: {0}")]
    Record(String),
    #[error("TLS setup failed: {0}")]
    Setup(String),
}
