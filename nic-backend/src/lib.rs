//! A software NIC that implements the ULP DDP contract as a smoltcp `Device`
//! decorator: receive placement and data-digest checking, transmit
//! data-digest insertion, resync. Invisible when every offload is off.
