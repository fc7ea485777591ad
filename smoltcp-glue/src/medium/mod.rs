//! Where Ethernet frames come from and go to.

pub mod tap;
pub mod wire;
