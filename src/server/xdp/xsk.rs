//! One AF_XDP socket with its own UMEM: the frame area shared with the kernel and the four
//! rings (fill, completion, RX, TX) mapped into this process. See the kernel's
//! Documentation/networking/af_xdp.rst; the structures below are its uapi (linux/if_xdp.h).
//!
//! Rings are single-producer/single-consumer between this thread and the kernel: the producer
//! index is published with release ordering after the descriptors are written, and read with
//! acquire ordering before they are read. Everything here belongs to one worker thread.

use std::io;
use std::mem::size_of;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, Ordering};

const AF_XDP: libc::c_int = 44;
const SOL_XDP: libc::c_int = 283;
const XDP_MMAP_OFFSETS: libc::c_int = 1;
const XDP_RX_RING: libc::c_int = 2;
const XDP_TX_RING: libc::c_int = 3;
const XDP_UMEM_REG: libc::c_int = 4;
const XDP_UMEM_FILL_RING: libc::c_int = 5;
const XDP_UMEM_COMPLETION_RING: libc::c_int = 6;
const XDP_STATISTICS: libc::c_int = 7;
const XDP_COPY: u16 = 1 << 1;
const XDP_ZEROCOPY: u16 = 1 << 2;
const XDP_USE_NEED_WAKEUP: u16 = 1 << 3;
const XDP_RING_NEED_WAKEUP: u32 = 1;
const XDP_PGOFF_RX_RING: libc::off_t = 0;
const XDP_PGOFF_TX_RING: libc::off_t = 0x8000_0000;
const XDP_UMEM_PGOFF_FILL_RING: libc::off_t = 0x1_0000_0000;
const XDP_UMEM_PGOFF_COMPLETION_RING: libc::off_t = 0x1_8000_0000;

/// Frame size in the UMEM: one page holds any Ethernet frame up to a 4 KiB MTU.
pub const FRAME_SIZE: usize = 4096;
/// Frames per socket (16 MiB of UMEM): fill and TX rings full at once still leave spares.
pub const FRAMES: usize = 4096;
/// Entries per ring.
pub const RING_SIZE: u32 = 2048;
/// Kicks per flush at most: a full batch takes two in copy mode; more means the kernel is
/// backed up, and the next round retries.
const MAX_TX_KICKS: u32 = 4;
/// Descriptors copy mode sends per kick at most (the kernel's TX_BATCH_SIZE): a kick with fewer
/// pending may wait for the next round's replies when that round is already waiting.
pub const TX_KICK_BATCH: u32 = 32;

#[repr(C)]
#[derive(Default, Clone, Copy)]
struct RingOffset {
    producer: u64,
    consumer: u64,
    desc: u64,
    flags: u64,
}

#[repr(C)]
#[derive(Default)]
struct MmapOffsets {
    rx: RingOffset,
    tx: RingOffset,
    fill: RingOffset,
    completion: RingOffset,
}

#[repr(C)]
struct UmemReg {
    addr: u64,
    len: u64,
    chunk_size: u32,
    headroom: u32,
    flags: u32,
    tx_metadata_len: u32,
}

#[repr(C)]
struct SockaddrXdp {
    family: u16,
    flags: u16,
    ifindex: u32,
    queue_id: u32,
    shared_umem_fd: u32,
}

/// An RX/TX descriptor: a frame address in the UMEM and a length.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct Desc {
    pub addr: u64,
    pub len: u32,
    pub options: u32,
}

/// The kernel's per-socket counters (`XDP_STATISTICS`).
#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct KernelStats {
    /// Dropped for other reasons (e.g. no room in the UMEM).
    pub rx_dropped: u64,
    pub rx_invalid_descs: u64,
    pub tx_invalid_descs: u64,
    /// Dropped because the RX ring was full: we did not keep up.
    pub rx_ring_full: u64,
    /// The fill ring was empty when a frame arrived.
    pub rx_fill_ring_empty_descs: u64,
    pub tx_ring_empty_descs: u64,
}

/// A mapping that is unmapped on drop.
struct Mapping {
    ptr: NonNull<u8>,
    len: usize,
}

impl Mapping {
    fn new(len: usize, fd: Option<RawFd>, offset: libc::off_t) -> io::Result<Mapping> {
        let (flags, fd) = match fd {
            Some(fd) => (libc::MAP_SHARED | libc::MAP_POPULATE, fd),
            None => (
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_POPULATE,
                -1,
            ),
        };
        // SAFETY: a fresh mapping of `len` bytes; the kernel picks the address.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                flags,
                fd,
                offset,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        NonNull::new(ptr.cast())
            .map(|ptr| Mapping { ptr, len })
            .ok_or_else(|| io::Error::other("mmap returned null"))
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: unmapping exactly what `new` mapped; nothing refers to it any more.
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}

/// One mapped ring. `T` is `u64` (fill, completion: frame addresses) or [`Desc`] (RX, TX).
struct Ring<T> {
    _map: Mapping,
    producer: *const AtomicU32,
    consumer: *const AtomicU32,
    flags: *const AtomicU32,
    descs: *mut T,
    mask: u32,
    /// Our copy of the index we advance (producer for fill/TX, consumer for RX/completion).
    local: u32,
    /// Last seen index of the other side.
    other: u32,
}

/// Which side of a ring this process is.
#[derive(Clone, Copy)]
enum Role {
    /// Fill and TX: we produce, the kernel consumes.
    Producer,
    /// RX and completion: the kernel produces, we consume.
    Consumer,
}

impl<T: Copy> Ring<T> {
    fn map(fd: RawFd, offsets: &RingOffset, pgoff: libc::off_t, role: Role) -> io::Result<Ring<T>> {
        let len = offsets.desc as usize + RING_SIZE as usize * size_of::<T>();
        let map = Mapping::new(len, Some(fd), pgoff)?;
        let base = map.ptr.as_ptr();
        // SAFETY: the kernel told us these offsets lie inside the mapping it made for us.
        let (producer, consumer, flags, descs) = unsafe {
            (
                base.add(offsets.producer as usize).cast::<AtomicU32>(),
                base.add(offsets.consumer as usize).cast::<AtomicU32>(),
                base.add(offsets.flags as usize).cast::<AtomicU32>(),
                base.add(offsets.desc as usize).cast::<T>(),
            )
        };
        // SAFETY: as above; both indices are initialised by the kernel.
        let (p, c) = unsafe {
            (
                (*producer).load(Ordering::Acquire),
                (*consumer).load(Ordering::Acquire),
            )
        };
        let (local, other) = match role {
            Role::Producer => (p, c),
            Role::Consumer => (c, p),
        };
        Ok(Ring {
            _map: map,
            producer,
            consumer,
            flags,
            descs,
            mask: RING_SIZE - 1,
            local,
            other,
        })
    }

    fn needs_wakeup(&self) -> bool {
        // SAFETY: `flags` points into our live mapping.
        unsafe { (*self.flags).load(Ordering::Relaxed) & XDP_RING_NEED_WAKEUP != 0 }
    }

    // --- as producer (fill, TX): local = producer index, other = consumer index ---

    fn free_slots(&mut self) -> u32 {
        let used = self.local.wrapping_sub(self.other);
        if used < RING_SIZE {
            return RING_SIZE - used;
        }
        // SAFETY: `consumer` points into our live mapping.
        self.other = unsafe { (*self.consumer).load(Ordering::Acquire) };
        RING_SIZE - self.local.wrapping_sub(self.other)
    }

    /// Entries published but not yet taken by the kernel (as of the last refresh).
    fn outstanding(&self) -> u32 {
        self.local.wrapping_sub(self.other)
    }

    fn refresh_consumer(&mut self) {
        // SAFETY: `consumer` points into our live mapping.
        self.other = unsafe { (*self.consumer).load(Ordering::Acquire) };
    }

    fn push(&mut self, value: T) {
        // SAFETY: the slot is ours until we publish the producer index (checked by callers
        // through free_slots).
        unsafe {
            self.descs
                .add((self.local & self.mask) as usize)
                .write(value)
        };
        self.local = self.local.wrapping_add(1);
    }

    fn publish(&mut self) {
        // SAFETY: `producer` points into our live mapping.
        unsafe { (*self.producer).store(self.local, Ordering::Release) };
    }

    // --- as consumer (RX, completion): local = consumer index, other = producer index ---

    fn available(&mut self) -> u32 {
        // SAFETY: `producer` points into our live mapping.
        self.other = unsafe { (*self.producer).load(Ordering::Acquire) };
        self.other.wrapping_sub(self.local)
    }

    fn read(&self, i: u32) -> T {
        // SAFETY: index i < available(): the kernel wrote it before publishing its producer.
        unsafe {
            self.descs
                .add((self.local.wrapping_add(i) & self.mask) as usize)
                .read()
        }
    }

    fn release(&mut self, n: u32) {
        self.local = self.local.wrapping_add(n);
        // SAFETY: `consumer` points into our live mapping.
        unsafe { (*self.consumer).store(self.local, Ordering::Release) };
    }
}

/// How a socket was bound.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CopyMode {
    ZeroCopy,
    Copy,
}

impl CopyMode {
    pub fn as_str(self) -> &'static str {
        match self {
            CopyMode::ZeroCopy => "zero-copy",
            CopyMode::Copy => "copy",
        }
    }
}

/// An AF_XDP socket bound to one queue of one interface, with its UMEM and rings.
pub struct XskSocket {
    fd: OwnedFd,
    umem: Mapping,
    fill: Ring<u64>,
    completion: Ring<u64>,
    rx: Ring<Desc>,
    tx: Ring<Desc>,
    /// Frames owned by us (neither in the fill ring nor in flight on TX).
    spare: Vec<u64>,
    pub mode: CopyMode,
}

// SAFETY: the raw pointers all point into mappings owned by the socket, which moves whole to
// the one worker thread that uses it.
unsafe impl Send for XskSocket {}

fn setsockopt<T>(fd: RawFd, name: libc::c_int, value: &T) -> io::Result<()> {
    // SAFETY: `value` is a live, correctly sized uapi struct.
    let r = unsafe {
        libc::setsockopt(
            fd,
            SOL_XDP,
            name,
            (value as *const T).cast(),
            size_of::<T>() as libc::socklen_t,
        )
    };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

fn getsockopt<T: Default>(fd: RawFd, name: libc::c_int) -> io::Result<T> {
    let mut value = T::default();
    let mut len = size_of::<T>() as libc::socklen_t;
    // SAFETY: the kernel writes at most `len` bytes into `value`.
    let r = unsafe { libc::getsockopt(fd, SOL_XDP, name, (&mut value as *mut T).cast(), &mut len) };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(value)
    }
}

impl XskSocket {
    /// Creates a socket for `queue` of `ifindex`: zero-copy if `try_zero_copy` and the driver
    /// has it, copy mode otherwise.
    pub fn open(ifindex: u32, queue: u32, try_zero_copy: bool) -> io::Result<XskSocket> {
        // SAFETY: plain socket(2).
        let raw = unsafe { libc::socket(AF_XDP, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) };
        if raw < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: a descriptor the kernel just gave us.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let umem = Mapping::new(FRAMES * FRAME_SIZE, None, 0)?;
        let reg = UmemReg {
            addr: umem.ptr.as_ptr() as u64,
            len: (FRAMES * FRAME_SIZE) as u64,
            chunk_size: FRAME_SIZE as u32,
            headroom: 0,
            flags: 0,
            tx_metadata_len: 0,
        };
        let raw = fd.as_raw_fd();
        setsockopt(raw, XDP_UMEM_REG, &reg)?;
        for ring in [
            XDP_UMEM_FILL_RING,
            XDP_UMEM_COMPLETION_RING,
            XDP_RX_RING,
            XDP_TX_RING,
        ] {
            setsockopt(raw, ring, &RING_SIZE)?;
        }
        let offsets: MmapOffsets = getsockopt(raw, XDP_MMAP_OFFSETS)?;
        let fill = Ring::map(raw, &offsets.fill, XDP_UMEM_PGOFF_FILL_RING, Role::Producer)?;
        let completion = Ring::map(
            raw,
            &offsets.completion,
            XDP_UMEM_PGOFF_COMPLETION_RING,
            Role::Consumer,
        )?;
        let rx = Ring::map(raw, &offsets.rx, XDP_PGOFF_RX_RING, Role::Consumer)?;
        let tx = Ring::map(raw, &offsets.tx, XDP_PGOFF_TX_RING, Role::Producer)?;
        let mut socket = XskSocket {
            fd,
            umem,
            fill,
            completion,
            rx,
            tx,
            spare: (0..FRAMES as u64).map(|i| i * FRAME_SIZE as u64).collect(),
            mode: CopyMode::Copy,
        };
        socket.mode = socket.bind(ifindex, queue, try_zero_copy)?;
        socket.refill();
        Ok(socket)
    }

    fn bind(&self, ifindex: u32, queue: u32, try_zero_copy: bool) -> io::Result<CopyMode> {
        let attempt = |flags: u16| {
            let addr = SockaddrXdp {
                family: AF_XDP as u16,
                flags: flags | XDP_USE_NEED_WAKEUP,
                ifindex,
                queue_id: queue,
                shared_umem_fd: 0,
            };
            // SAFETY: a correctly sized sockaddr_xdp.
            let r = unsafe {
                libc::bind(
                    self.fd.as_raw_fd(),
                    (&addr as *const SockaddrXdp).cast(),
                    size_of::<SockaddrXdp>() as libc::socklen_t,
                )
            };
            if r < 0 {
                Err(io::Error::last_os_error())
            } else {
                Ok(())
            }
        };
        if try_zero_copy && attempt(XDP_ZEROCOPY).is_ok() {
            return Ok(CopyMode::ZeroCopy);
        }
        attempt(XDP_COPY).map(|()| CopyMode::Copy)
    }

    pub fn raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// Gives the kernel every spare frame the fill ring has room for.
    pub fn refill(&mut self) {
        let room = self.fill.free_slots() as usize;
        let n = room.min(self.spare.len());
        if n == 0 {
            return;
        }
        for _ in 0..n {
            if let Some(addr) = self.spare.pop() {
                self.fill.push(addr);
            }
        }
        self.fill.publish();
    }

    /// Takes back frames whose transmission finished.
    pub fn reclaim(&mut self) {
        let n = self.completion.available();
        for i in 0..n {
            // Replies go out from where their query arrived, inside the frame: back to the
            // frame's start for the fill ring.
            self.spare
                .push(self.completion.read(i) & !(FRAME_SIZE as u64 - 1));
        }
        if n > 0 {
            self.completion.release(n);
        }
    }

    /// Received descriptors waiting, up to `max`.
    pub fn received(&mut self, max: u32) -> u32 {
        self.rx.available().min(max)
    }

    /// The `i`-th waiting RX descriptor.
    pub fn rx_desc(&self, i: u32) -> Desc {
        self.rx.read(i)
    }

    /// Marks the first `n` RX descriptors as consumed.
    pub fn release_rx(&mut self, n: u32) {
        self.rx.release(n);
    }

    /// The frame at `addr`, whole (`FRAME_SIZE` bytes).
    pub fn frame_mut(&mut self, addr: u64) -> Option<&mut [u8]> {
        let start = (addr as usize) & !(FRAME_SIZE - 1);
        if start + FRAME_SIZE > self.umem.len {
            return None;
        }
        // SAFETY: inside the UMEM; the frame belongs to us between RX and TX/fill.
        Some(unsafe {
            std::slice::from_raw_parts_mut(self.umem.ptr.as_ptr().add(start), FRAME_SIZE)
        })
    }

    /// Room on the TX ring.
    pub fn tx_room(&mut self) -> u32 {
        self.tx.free_slots()
    }

    /// Queues `len` bytes at `addr` (a frame's start or a place inside it, e.g. where the RX
    /// descriptor put the query) for transmission.
    pub fn transmit(&mut self, addr: u64, len: u32) {
        self.tx.push(Desc {
            addr,
            len,
            options: 0,
        });
    }

    /// Hands a frame back without sending it.
    pub fn recycle(&mut self, addr: u64) {
        self.spare.push(addr & !(FRAME_SIZE as u64 - 1));
    }

    /// Publishes queued transmissions without a kick: the kernel takes them at the next
    /// [`flush_tx`](Self::flush_tx) (copy mode sends only inside a kick).
    pub fn publish_tx(&mut self, queued: u32) {
        if queued > 0 {
            self.tx.publish();
        }
    }

    /// Transmissions published (or queued) that the kernel has not taken yet.
    pub fn tx_pending(&mut self) -> u32 {
        self.tx.refresh_consumer();
        self.tx.outstanding()
    }

    /// Publishes queued transmissions and kicks the kernel while it has not taken them all.
    ///
    /// In copy mode the kernel sends only inside the kick, and at most a small budget of
    /// descriptors per kick (32 on current kernels), so one kick may leave part of a batch on
    /// the ring; kicking again until the consumer index catches up sends the rest now instead
    /// of after the next poll. With nothing outstanding no syscall is made at all, which keeps
    /// the idle path to a single poll. Returns the kicks made.
    pub fn flush_tx(&mut self, queued: u32) -> u32 {
        if queued > 0 {
            self.tx.publish();
        }
        let mut kicks = 0;
        for _ in 0..MAX_TX_KICKS {
            self.tx.refresh_consumer();
            if self.tx.outstanding() == 0 {
                return kicks;
            }
            if queued == 0 && !self.tx.needs_wakeup() {
                return kicks; // zero-copy driver without need-wakeup: it is sending already
            }
            kicks += 1;
            // SAFETY: sendto with no data is the documented TX kick for AF_XDP.
            let rc = unsafe {
                libc::sendto(
                    self.fd.as_raw_fd(),
                    std::ptr::null(),
                    0,
                    libc::MSG_DONTWAIT,
                    std::ptr::null(),
                    0,
                )
            };
            if rc < 0 {
                return kicks; // EAGAIN/ENOBUFS: the completion ring is full; retried next round
            }
        }
        kicks
    }

    /// Whether the kernel wants a wake-up (poll/recv) to continue filling RX.
    pub fn fill_needs_wakeup(&self) -> bool {
        self.fill.needs_wakeup()
    }

    /// Waits up to `timeout_ms` for received frames.
    pub fn wait(&self, timeout_ms: i32) {
        let mut pfd = libc::pollfd {
            fd: self.fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd.
        unsafe { libc::poll(&mut pfd, 1, timeout_ms) };
    }

    pub fn kernel_stats(&self) -> KernelStats {
        getsockopt(self.fd.as_raw_fd(), XDP_STATISTICS).unwrap_or_default()
    }
}
