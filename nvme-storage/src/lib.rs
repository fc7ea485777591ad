//! The storage behind a controller's namespaces, for the contract in
//! [`nvme_of::namespace`]:
//!
//! - [`RamNamespace`]: sparse memory, allocated 128 KiB at a time; it
//!   answers every I/O inside `submit`, as memory never makes anyone wait,
//!   and lends what it holds to large reads instead of copying it
//!   ([`Namespace::lend`](nvme_of::namespace::Namespace::lend)).
//! - [`FileNamespace`]: a regular file or a block device, with positional
//!   I/O on worker threads ([`Workers`]), so a slow `fdatasync` stalls
//!   only the commands that wait for it, never the poll loop.

mod file;
mod ram;
mod workers;

pub use file::FileNamespace;
pub use ram::{RamNamespace, RamStats};
pub use workers::Workers;

use std::io;

/// A namespace holds whole blocks, one at least: a size that is not a
/// whole number of them is refused, not rounded down, so that nothing the
/// user gave is silently left out.
pub fn check_size(size: u64, block_size: u32) -> io::Result<()> {
    let block = u64::from(block_size);
    let (blocks, tail) = (size / block, size % block);
    let why = if blocks == 0 {
        format!("{size} bytes is smaller than one {block}-byte block")
    } else if tail != 0 {
        format!(
            "{size} bytes is not a whole number of {block}-byte blocks ({blocks} blocks and {tail} bytes)"
        )
    } else {
        return Ok(());
    };
    Err(io::Error::new(io::ErrorKind::InvalidInput, why))
}

/// Only 512 and 4096 byte logical blocks are offered.
pub fn check_block_size(block_size: u32) -> io::Result<()> {
    match block_size {
        512 | 4096 => Ok(()),
        other => Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("block size {other} is not supported (use 512 or 4096)"),
        )),
    }
}
