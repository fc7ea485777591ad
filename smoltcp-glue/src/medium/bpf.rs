//! The `bpf` system call, for the two small programs the media load
//! themselves (an XDP redirect, a TAP queue steering): a handful of
//! instructions whose encoding the ABI fixes need no compiler and no
//! loader library.

use crate::medium::context;
use std::io;
use std::os::fd::{FromRawFd, OwnedFd, RawFd};

// bpf(2) commands (linux/bpf.h).
pub(crate) const BPF_MAP_CREATE: libc::c_int = 0;
pub(crate) const BPF_MAP_UPDATE_ELEM: libc::c_int = 2;
const BPF_PROG_LOAD: libc::c_int = 5;
pub(crate) const BPF_LINK_CREATE: libc::c_int = 28;

/// The opcodes of the instructions our programs use (linux/bpf_common.h,
/// linux/bpf.h): class, then operation and source (`K` an immediate, `X`
/// a register); loads read the packet (`ABS`, `IND`) or memory (`MEM`).
pub(crate) mod op {
    pub(crate) const LD_ABS_H: u8 = 0x28;
    pub(crate) const LD_ABS_B: u8 = 0x30;
    pub(crate) const LD_IND_H: u8 = 0x48;
    pub(crate) const LD_IMM64: u8 = 0x18;
    pub(crate) const LDX_MEM_W: u8 = 0x61;
    pub(crate) const MOV_K: u8 = 0xb7;
    pub(crate) const MOV_X: u8 = 0xbf;
    pub(crate) const ADD_X: u8 = 0x0f;
    pub(crate) const XOR_X: u8 = 0xaf;
    pub(crate) const AND_K: u8 = 0x57;
    pub(crate) const LSH_K: u8 = 0x67;
    pub(crate) const RSH_K: u8 = 0x77;
    pub(crate) const JNE_K: u8 = 0x55;
    pub(crate) const CALL: u8 = 0x85;
    pub(crate) const EXIT: u8 = 0x95;
}

/// One instruction: opcode, destination and source registers, offset and
/// immediate, laid out as a little-endian kernel reads it.
pub(crate) fn insn(code: u8, dst: u8, src: u8, off: i16, imm: i32) -> u64 {
    u64::from(code)
        | u64::from(dst | src << 4) << 8
        | u64::from(off as u16) << 16
        | u64::from(imm as u32) << 32
}

/// Load `insns` as a program of `prog_type`; `what` names it in errors.
pub(crate) fn load(
    prog_type: u32,
    expected_attach_type: u32,
    insns: &[u64],
    what: &str,
) -> io::Result<OwnedFd> {
    let license = c"GPL";
    let mut load = ProgLoad {
        prog_type,
        insn_cnt: insns.len() as u32,
        insns: insns.as_ptr() as u64,
        license: license.as_ptr() as u64,
        expected_attach_type,
        ..ProgLoad::default()
    };
    load.prog_name[..8].copy_from_slice(b"nvme_ddp");
    bpf(BPF_PROG_LOAD, &mut load)
        .map(owned)
        .map_err(context(format_args!("loading the {what} program")))
}

pub(crate) fn bpf<T>(cmd: libc::c_int, attr: &mut T) -> io::Result<libc::c_long> {
    // SAFETY: `attr` is the union member `cmd` reads, zero-padded, of the
    // size we pass.
    let r = unsafe {
        libc::syscall(libc::SYS_bpf, cmd, attr as *mut T, size_of::<T>() as libc::c_uint)
    };
    if r < 0 { Err(io::Error::last_os_error()) } else { Ok(r) }
}

pub(crate) fn owned(fd: libc::c_long) -> OwnedFd {
    // SAFETY: a descriptor the kernel just returned to us alone.
    unsafe { OwnedFd::from_raw_fd(fd as RawFd) }
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
