//! The XDP program and the `bpf(2)` calls that load and attach it, without libbpf or a BPF
//! compiler: the program is a few dozen instructions, assembled here from a readable listing,
//! so a fresh machine builds steerdns with nothing but a Rust toolchain.
//!
//! The program passes everything to the kernel except UDP to one of our ports over IPv4
//! (no options, not a fragment) or IPv6 (UDP as the first next header); those go to the AF_XDP
//! socket of the receive queue they arrived on, or to the kernel if that queue has none.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

const BPF_MAP_CREATE: libc::c_long = 0;
const BPF_MAP_UPDATE_ELEM: libc::c_long = 2;
const BPF_PROG_LOAD: libc::c_long = 5;
const BPF_LINK_CREATE: libc::c_long = 28;
const BPF_MAP_TYPE_XSKMAP: u32 = 17;
const BPF_PROG_TYPE_XDP: u32 = 6;
const BPF_XDP: u32 = 37;
const BPF_FUNC_REDIRECT_MAP: i32 = 51;
const XDP_PASS: i32 = 2;
/// `XDP_FLAGS_SKB_MODE` / `XDP_FLAGS_DRV_MODE`.
const XDP_FLAGS_SKB_MODE: u32 = 1 << 1;
const XDP_FLAGS_DRV_MODE: u32 = 1 << 2;

/// Where the kernel runs the program.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttachMode {
    /// In the driver, before an skb exists (fastest; veth, virtio-net and most NICs have it).
    Native,
    /// After the kernel built an skb (works on every interface; slower).
    Generic,
}

impl AttachMode {
    pub fn as_str(self) -> &'static str {
        match self {
            AttachMode::Native => "native",
            AttachMode::Generic => "generic",
        }
    }
}

/// One eBPF instruction (see the kernel's Documentation/bpf/standardization/instruction-set.rst).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(C)]
pub struct Insn {
    code: u8,
    regs: u8,
    off: i16,
    imm: i32,
}

/// A jump target in the listing, resolved to an offset when assembled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Label {
    Ipv4,
    Ipv6,
    CheckPort,
    Redirect,
    Pass,
}

/// One line of the listing: an instruction, a jump to a label, or a label.
enum Line {
    Op(Insn),
    Jump(Insn, Label),
    Here(Label),
}

fn insn(code: u8, dst: u8, src: u8, off: i16, imm: i32) -> Insn {
    Insn {
        code,
        regs: (src << 4) | dst,
        off,
        imm,
    }
}

// Opcodes used below (class | mode/op | source).
const LDX_W: u8 = 0x61;
const LDX_H: u8 = 0x69;
const LDX_B: u8 = 0x71;
const MOV64_X: u8 = 0xbf;
const MOV64_K: u8 = 0xb7;
const ADD64_K: u8 = 0x07;
const AND64_K: u8 = 0x57;
const JA: u8 = 0x05;
const JEQ_K: u8 = 0x15;
const JNE_K: u8 = 0x55;
const JGT_X: u8 = 0x2d;
const CALL: u8 = 0x85;
const EXIT: u8 = 0x95;
const LD_IMM64: u8 = 0x18;
const PSEUDO_MAP_FD: u8 = 1;

/// A 16-bit field in network byte order as a little-endian load sees it.
fn wire_u16(value: u16) -> i32 {
    i32::from(value.swap_bytes())
}

/// The program for `ports` (each compared in turn) with the XSKMAP `map_fd`.
pub fn program(ports: &[u16], map_fd: RawFd) -> Vec<Insn> {
    use Label::*;
    use Line::*;
    // r6 = ctx, r2 = data, r3 = data_end, r4 = bounds probe, r5 = field.
    let mut listing = vec![
        Op(insn(MOV64_X, 6, 1, 0, 0)),
        Op(insn(LDX_W, 2, 1, 0, 0)),
        Op(insn(LDX_W, 3, 1, 4, 0)),
        Op(insn(MOV64_X, 4, 2, 0, 0)),
        Op(insn(ADD64_K, 4, 0, 0, 14)),
        Jump(insn(JGT_X, 4, 3, 0, 0), Pass),
        Op(insn(LDX_H, 5, 2, 12, 0)),
        Jump(insn(JEQ_K, 5, 0, 0, wire_u16(0x0800)), Ipv4),
        Jump(insn(JEQ_K, 5, 0, 0, wire_u16(0x86dd)), Ipv6),
        Jump(insn(JA, 0, 0, 0, 0), Pass),
        Here(Ipv4),
        Op(insn(MOV64_X, 4, 2, 0, 0)),
        Op(insn(ADD64_K, 4, 0, 0, 14 + 20 + 8)),
        Jump(insn(JGT_X, 4, 3, 0, 0), Pass),
        Op(insn(LDX_B, 5, 2, 14, 0)),
        Jump(insn(JNE_K, 5, 0, 0, 0x45), Pass), // version 4, no options
        Op(insn(LDX_B, 5, 2, 14 + 9, 0)),
        Jump(insn(JNE_K, 5, 0, 0, 17), Pass), // UDP
        Op(insn(LDX_H, 5, 2, 14 + 6, 0)),
        Op(insn(AND64_K, 5, 0, 0, wire_u16(0x3fff))),
        Jump(insn(JNE_K, 5, 0, 0, 0), Pass), // a fragment: the kernel reassembles
        Op(insn(LDX_H, 5, 2, 14 + 20 + 2, 0)),
        Jump(insn(JA, 0, 0, 0, 0), CheckPort),
        Here(Ipv6),
        Op(insn(MOV64_X, 4, 2, 0, 0)),
        Op(insn(ADD64_K, 4, 0, 0, 14 + 40 + 8)),
        Jump(insn(JGT_X, 4, 3, 0, 0), Pass),
        Op(insn(LDX_B, 5, 2, 14 + 6, 0)),
        Jump(insn(JNE_K, 5, 0, 0, 17), Pass), // UDP right after the fixed header
        Op(insn(LDX_H, 5, 2, 14 + 40 + 2, 0)),
        Here(CheckPort),
    ];
    for &port in ports {
        listing.push(Jump(insn(JEQ_K, 5, 0, 0, wire_u16(port)), Redirect));
    }
    listing.extend([
        Jump(insn(JA, 0, 0, 0, 0), Pass),
        Here(Redirect),
        Op(insn(LDX_W, 2, 6, 16, 0)), // ctx->rx_queue_index
        Op(insn(LD_IMM64, 1, PSEUDO_MAP_FD, 0, map_fd)),
        Op(insn(0, 0, 0, 0, 0)), // upper half of the 64-bit immediate
        Op(insn(MOV64_K, 3, 0, 0, XDP_PASS)), // no socket on this queue: to the kernel
        Op(insn(CALL, 0, 0, 0, BPF_FUNC_REDIRECT_MAP)),
        Op(insn(EXIT, 0, 0, 0, 0)),
        Here(Pass),
        Op(insn(MOV64_K, 0, 0, 0, XDP_PASS)),
        Op(insn(EXIT, 0, 0, 0, 0)),
    ]);
    assemble(&listing)
}

fn assemble(listing: &[Line]) -> Vec<Insn> {
    let mut at = Vec::new();
    let mut pc = 0i32;
    for line in listing {
        match line {
            Line::Here(label) => at.push((*label, pc)),
            _ => pc += 1,
        }
    }
    let target = |label: Label| {
        at.iter()
            .find(|(l, _)| *l == label)
            .map(|(_, pc)| *pc)
            .unwrap_or_else(|| unreachable!("label {label:?} is in the listing"))
    };
    let mut out = Vec::with_capacity(pc as usize);
    for line in listing {
        match line {
            Line::Op(i) => out.push(*i),
            Line::Jump(i, label) => {
                let from = out.len() as i32 + 1;
                out.push(Insn {
                    off: (target(*label) - from) as i16,
                    ..*i
                });
            }
            Line::Here(_) => {}
        }
    }
    out
}

fn bpf(cmd: libc::c_long, attr: &mut [u64]) -> io::Result<RawFd> {
    // SAFETY: `attr` is a zero-padded `union bpf_attr` prefix of the size passed; the kernel
    // reads (and for some commands writes) at most that many bytes.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            cmd,
            attr.as_mut_ptr(),
            std::mem::size_of_val(attr) as libc::c_uint,
        )
    };
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret as RawFd)
    }
}

fn owned(fd: RawFd) -> OwnedFd {
    // SAFETY: the kernel just returned this descriptor to us; nothing else owns it.
    unsafe { OwnedFd::from_raw_fd(fd) }
}

fn pair(low: u32, high: u32) -> u64 {
    u64::from(low) | (u64::from(high) << 32)
}

/// An XSKMAP with one slot per receive queue.
pub fn create_socket_map(queues: u32) -> io::Result<OwnedFd> {
    let mut attr = [0u64; 16];
    attr[0] = pair(BPF_MAP_TYPE_XSKMAP, 4); // map_type, key_size
    attr[1] = pair(4, queues.max(1)); // value_size, max_entries
    bpf(BPF_MAP_CREATE, &mut attr).map(owned)
}

/// Puts the AF_XDP socket `socket` in slot `queue` of `map`.
pub fn set_queue_socket(map: &OwnedFd, queue: u32, socket: RawFd) -> io::Result<()> {
    let key = queue;
    let value = socket as u32;
    let mut attr = [0u64; 4];
    attr[0] = map.as_raw_fd() as u64;
    attr[1] = &key as *const u32 as u64;
    attr[2] = &value as *const u32 as u64;
    attr[3] = 0; // BPF_ANY
    bpf(BPF_MAP_UPDATE_ELEM, &mut attr).map(|_| ())
}

/// Loads the program; a verifier refusal comes back with the verifier's log.
pub fn load_program(insns: &[Insn]) -> io::Result<OwnedFd> {
    let license = c"Dual MIT/GPL";
    let mut log = vec![0u8; 64 * 1024];
    let mut attr = [0u64; 16];
    attr[0] = pair(BPF_PROG_TYPE_XDP, insns.len() as u32);
    attr[1] = insns.as_ptr() as u64;
    attr[2] = license.as_ptr() as u64;
    attr[3] = pair(1, log.len() as u32); // log_level, log_size
    attr[4] = log.as_mut_ptr() as u64;
    // attr[5]: kern_version, prog_flags; attr[6..8]: prog_name; attr[8]: prog_ifindex,
    // expected_attach_type.
    let name = b"steerdns_xdp\0\0\0\0";
    attr[6] = u64::from_le_bytes(name[..8].try_into().unwrap_or_default());
    attr[7] = u64::from_le_bytes(name[8..].try_into().unwrap_or_default());
    attr[8] = pair(0, BPF_XDP);
    bpf(BPF_PROG_LOAD, &mut attr).map(owned).map_err(|e| {
        let end = log.iter().position(|&b| b == 0).unwrap_or(log.len());
        let text = String::from_utf8_lossy(&log[..end]);
        let last = text.lines().rev().take(3).collect::<Vec<_>>().join(" | ");
        if last.is_empty() {
            e
        } else {
            io::Error::new(e.kind(), format!("{e} (verifier: {last})"))
        }
    })
}

/// Attaches `program` to `ifindex` as a BPF link: detached by the kernel when the returned
/// descriptor closes (also when the process dies), so a crash leaves no program behind.
pub fn attach(program: &OwnedFd, ifindex: u32, mode: AttachMode) -> io::Result<OwnedFd> {
    let flags = match mode {
        AttachMode::Native => XDP_FLAGS_DRV_MODE,
        AttachMode::Generic => XDP_FLAGS_SKB_MODE,
    };
    let mut attr = [0u64; 8];
    attr[0] = pair(program.as_raw_fd() as u32, ifindex);
    attr[1] = pair(BPF_XDP, flags);
    bpf(BPF_LINK_CREATE, &mut attr).map(owned)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jumps_land_on_their_labels() {
        let p = program(&[53, 5353], 7);
        let pass = p.len() - 2;
        // Every jump lands inside the program, and the first bounds check goes to "pass".
        for (pc, i) in p.iter().enumerate() {
            if i.code & 0x07 == 0x05 && i.code != CALL && i.code != EXIT {
                let to = pc as i64 + 1 + i64::from(i.off);
                assert!((0..p.len() as i64).contains(&to), "insn {pc} jumps to {to}");
            }
        }
        assert_eq!(5 + 1 + i64::from(p[5].off), pass as i64);
        // The map descriptor is in the 64-bit load, marked as a map fd.
        let ld = p.iter().position(|i| i.code == LD_IMM64).unwrap();
        assert_eq!((p[ld].imm, p[ld].regs >> 4), (7, PSEUDO_MAP_FD));
        // Both ports are compared in network byte order.
        let ports: Vec<i32> = p
            .iter()
            .filter(|i| i.code == JEQ_K && i.regs == 5)
            .map(|i| i.imm)
            .collect();
        assert!(ports.contains(&wire_u16(53)) && ports.contains(&wire_u16(5353)));
        assert_eq!(wire_u16(53), 0x3500);
    }
}
