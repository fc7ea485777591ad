//! The XDP program that hands an interface's frames to an AF_XDP socket,
//! loaded and attached with the `bpf` system call alone.

use crate::medium::bpf::op::{CALL, EXIT, LD_IMM64, LDX_MEM_W, MOV_K};
use crate::medium::bpf::{
    BPF_LINK_CREATE, BPF_MAP_CREATE, BPF_MAP_UPDATE_ELEM, bpf, insn, load, owned,
};
use crate::medium::context;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};

// The map and program types and attach flags we use (linux/bpf.h,
// linux/if_link.h).
const BPF_MAP_TYPE_XSKMAP: u32 = 17;
const BPF_PROG_TYPE_XDP: u32 = 6;
const BPF_XDP: u32 = 37;
const XDP_FLAGS_DRV_MODE: u32 = 1 << 2;
const BPF_PSEUDO_MAP_FD: u8 = 1;
const BPF_FUNC_REDIRECT_MAP: i32 = 51;
const XDP_PASS: i32 = 2;

/// The program on an interface, and the map it hands frames through; it
/// leaves the interface when this drops.
pub(super) struct Redirect {
    // Dropped in this order: the program leaves the interface first.
    _link: OwnedFd,
    map: OwnedFd,
    _prog: OwnedFd,
}

impl Redirect {
    /// Load the program and attach it to interface `ifindex` (`name`) in
    /// its driver (native XDP).
    pub(super) fn attach(ifindex: u32, name: &str) -> io::Result<Self> {
        let mut create =
            MapCreate { map_type: BPF_MAP_TYPE_XSKMAP, key_size: 4, value_size: 4, max_entries: 1 };
        let map = owned(bpf(BPF_MAP_CREATE, &mut create).map_err(context("XSKMAP"))?);
        let prog = load(BPF_PROG_TYPE_XDP, BPF_XDP, &program(map.as_raw_fd()), "XDP")?;
        let mut link = LinkCreate {
            prog_fd: prog.as_raw_fd() as u32,
            target_ifindex: ifindex,
            attach_type: BPF_XDP,
            flags: XDP_FLAGS_DRV_MODE,
        };
        let link = owned(
            bpf(BPF_LINK_CREATE, &mut link)
                .map_err(context(format!("native XDP on {name} (its driver may lack it)")))?,
        );
        Ok(Self { _link: link, map, _prog: prog })
    }

    /// Hand receive queue 0's frames to `socket`.
    pub(super) fn to(&self, socket: RawFd) -> io::Result<()> {
        let (key, value) = (0u32, socket as u32);
        let mut update = MapUpdate {
            map_fd: self.map.as_raw_fd() as u32,
            _pad: 0,
            key: &key as *const u32 as u64,
            value: &value as *const u32 as u64,
            flags: 0,
        };
        bpf(BPF_MAP_UPDATE_ELEM, &mut update)
            .map(drop)
            .map_err(context("adding the socket to the map"))
    }
}

/// The program: `return bpf_redirect_map(&map, ctx->rx_queue_index,
/// XDP_PASS)`, which hands a frame to the socket of its receive queue and
/// any frame of a queue without one to the kernel.
fn program(map: RawFd) -> [u64; 6] {
    [
        insn(LDX_MEM_W, 2, 1, 16, 0),                 // r2 = *(u32 *)(r1 + 16)
        insn(LD_IMM64, 1, BPF_PSEUDO_MAP_FD, 0, map), // r1 = map (two slots)
        0,                                            //
        insn(MOV_K, 3, 0, 0, XDP_PASS),               // r3 = XDP_PASS
        insn(CALL, 0, 0, 0, BPF_FUNC_REDIRECT_MAP),   // call bpf_redirect_map
        insn(EXIT, 0, 0, 0, 0),                       // exit
    ]
}

#[repr(C)]
#[derive(Default)]
struct MapCreate {
    map_type: u32,
    key_size: u32,
    value_size: u32,
    max_entries: u32,
}

#[repr(C)]
struct MapUpdate {
    map_fd: u32,
    _pad: u32,
    key: u64,
    value: u64,
    flags: u64,
}

#[repr(C)]
struct LinkCreate {
    prog_fd: u32,
    target_ifindex: u32,
    attach_type: u32,
    flags: u32,
}
