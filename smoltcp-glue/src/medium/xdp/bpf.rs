//! The XDP program that hands an interface's frames to an AF_XDP socket,
//! loaded and attached with the `bpf` system call alone: six instructions
//! do not need a compiler or a loader library.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

// The bpf(2) commands, program and map types and attach flags we use
// (linux/bpf.h, linux/if_link.h).
const BPF_MAP_CREATE: libc::c_int = 0;
const BPF_MAP_UPDATE_ELEM: libc::c_int = 2;
const BPF_PROG_LOAD: libc::c_int = 5;
const BPF_LINK_CREATE: libc::c_int = 28;
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
        let context =
            |what: String| move |e: io::Error| io::Error::new(e.kind(), format!("{what}: {e}"));
        let mut create =
            MapCreate { map_type: BPF_MAP_TYPE_XSKMAP, key_size: 4, value_size: 4, max_entries: 1 };
        let map = owned(bpf(BPF_MAP_CREATE, &mut create).map_err(context("XSKMAP".into()))?);
        let insns = program(map.as_raw_fd());
        let license = c"GPL";
        let mut load = ProgLoad {
            prog_type: BPF_PROG_TYPE_XDP,
            insn_cnt: insns.len() as u32,
            insns: insns.as_ptr() as u64,
            license: license.as_ptr() as u64,
            expected_attach_type: BPF_XDP,
            ..ProgLoad::default()
        };
        load.prog_name[..8].copy_from_slice(b"nvme_ddp");
        let prog = owned(
            bpf(BPF_PROG_LOAD, &mut load).map_err(context("loading the XDP program".into()))?,
        );
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
            .map_err(|e| io::Error::new(e.kind(), format!("adding the socket to the map: {e}")))
    }
}

fn bpf<T>(cmd: libc::c_int, attr: &mut T) -> io::Result<libc::c_long> {
    // SAFETY: `attr` is the union member `cmd` reads, zero-padded, of the
    // size we pass.
    let r = unsafe {
        libc::syscall(libc::SYS_bpf, cmd, attr as *mut T, size_of::<T>() as libc::c_uint)
    };
    if r < 0 { Err(io::Error::last_os_error()) } else { Ok(r) }
}

pub(super) fn owned(fd: libc::c_long) -> OwnedFd {
    // SAFETY: a descriptor the kernel just returned to us alone.
    unsafe { OwnedFd::from_raw_fd(fd as RawFd) }
}

/// The program: `return bpf_redirect_map(&map, ctx->rx_queue_index,
/// XDP_PASS)`, which hands a frame to the socket of its receive queue and
/// any frame of a queue without one to the kernel.
fn program(map: RawFd) -> [u64; 6] {
    let insn = |code: u8, dst: u8, src: u8, off: i16, imm: i32| {
        u64::from(code)
            | u64::from(dst | src << 4) << 8
            | u64::from(off as u16) << 16
            | u64::from(imm as u32) << 32
    };
    [
        insn(0x61, 2, 1, 16, 0),                    // r2 = *(u32 *)(r1 + 16)
        insn(0x18, 1, BPF_PSEUDO_MAP_FD, 0, map),   // r1 = map (two slots)
        0,                                          //
        insn(0xb7, 3, 0, 0, XDP_PASS),              // r3 = XDP_PASS
        insn(0x85, 0, 0, 0, BPF_FUNC_REDIRECT_MAP), // call bpf_redirect_map
        insn(0x95, 0, 0, 0, 0),                     // exit
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
#[derive(Default)]
struct ProgLoad {
    prog_type: u32,
    insn_cnt: u32,
    insns: u64,
    license: u64,
    log_level: u32,
    log_size: u32,
    log_buf: u64,
    kern_version: u32,
    prog_flags: u32,
    prog_name: [u8; 16],
    prog_ifindex: u32,
    expected_attach_type: u32,
}

#[repr(C)]
struct LinkCreate {
    prog_fd: u32,
    target_ifindex: u32,
    attach_type: u32,
    flags: u32,
}
