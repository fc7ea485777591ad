//! The storage behind a controller's namespaces, for the contract in
//! [`nvme_of::namespace`]:
//!
//! - [`RamNamespace`]: sparse memory, allocated a megabyte at a time; it
//!   answers every I/O inside `submit`, as memory never makes anyone wait.
//! - [`FileNamespace`]: a regular file or a block device, with positional
//!   I/O on worker threads ([`Workers`]), so a slow `fdatasync` stalls
//!   only the commands that wait for it, never the poll loop.

mod file;
mod ram;
mod workers;

pub use file::FileNamespace;
pub use ram::RamNamespace;
pub use workers::Workers;

use std::io;

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
