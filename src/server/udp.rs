//! The UDP fast path: one SO_REUSEPORT socket per worker thread, batched with `recvmmsg` /
//! `sendmmsg`. Buffers are allocated once per worker; the loop itself allocates nothing (but for
//! the answer to a NOTIFY, which is no query: [`super::respond_or_notify`]).

use std::io;
use std::mem::{size_of, zeroed};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use super::respond_or_notify;
use crate::dns::wire::{Requester, Transport};
use crate::snapshot::SharedSnapshot;

/// Datagrams taken from the kernel per system call.
const BATCH: usize = 64;
/// Largest query we read; anything longer is not a DNS query over UDP worth answering.
const MAX_QUERY: usize = 4096;
/// Largest UDP response (our advertised EDNS payload is capped below this).
const MAX_RESPONSE: usize = 4096;
/// How often a blocked worker wakes to look at the stop flag.
const WAKE_INTERVAL: Duration = Duration::from_millis(250);

/// Runs one worker until `stop` is set, then leaves gracefully (see `leave_and_drain`).
pub fn run_worker(
    socket: UdpSocket,
    snapshot: SharedSnapshot,
    stop: Arc<AtomicBool>,
) -> io::Result<()> {
    socket.set_read_timeout(Some(WAKE_INTERVAL))?;
    // Counters of this thread go to a slot of its own: no cache line shared with other workers.
    crate::metrics::claim_worker_slot();
    let mut batch = Batch::new();
    while !stop.load(Ordering::Relaxed) {
        let received = match batch.receive(&socket, libc::MSG_WAITFORONE) {
            Ok(n) => n,
            Err(e) if is_transient(&e) => continue,
            Err(e) => return Err(e),
        };
        answer_batch(&mut batch, &socket, &snapshot, received);
    }
    leave_and_drain(&socket, &mut batch, &snapshot)
}

/// Stops receiving new queries without losing the ones already queued: connecting the socket
/// takes it out of the SO_REUSEPORT group (the kernel hashes new flows only over unconnected
/// members, so a new process on the same port gets them), then whatever is queued is answered.
fn leave_and_drain(
    socket: &UdpSocket,
    batch: &mut Batch,
    snapshot: &SharedSnapshot,
) -> io::Result<()> {
    let nowhere = match socket.local_addr()? {
        SocketAddr::V4(_) => SocketAddr::from((Ipv4Addr::LOCALHOST, 9)),
        SocketAddr::V6(_) => SocketAddr::from((Ipv6Addr::LOCALHOST, 9)),
    };
    socket.connect(nowhere)?;
    loop {
        match batch.receive(socket, libc::MSG_DONTWAIT) {
            Ok(0) => return Ok(()),
            Ok(n) => answer_batch(batch, socket, snapshot, n),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
            Err(e) => return Err(e),
        }
    }
}

/// Answers the `received` queries of a batch and sends the replies in one call.
fn answer_batch(batch: &mut Batch, socket: &UdpSocket, snapshot: &SharedSnapshot, received: usize) {
    let current = snapshot.load();
    let mut replies = 0;
    for i in 0..received {
        let Some(peer) = batch.peer(i) else { continue };
        let client = Requester::new(peer.ip(), Transport::Udp);
        let query_len = batch.in_msgs[i].msg_len as usize;
        let (query, response) = batch.buffers(i);
        if let Some(len) = respond_or_notify(&current, &query[..query_len], &client, response) {
            batch.stage_reply(i, replies, len);
            replies += 1;
        }
    }
    drop(current);
    if replies > 0 {
        batch.send(socket, replies);
    }
}

fn is_transient(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut | io::ErrorKind::Interrupted
    ) || e.raw_os_error() == Some(libc::ECONNREFUSED)
}

/// The buffers and kernel structures for one batch; pointers into the boxed buffers are set
/// up once, since the boxes never move.
struct Batch {
    queries: Box<[[u8; MAX_QUERY]]>,
    responses: Box<[[u8; MAX_RESPONSE]]>,
    peers: Box<[libc::sockaddr_storage]>,
    in_iov: Box<[libc::iovec]>,
    in_msgs: Box<[libc::mmsghdr]>,
    out_iov: Box<[libc::iovec]>,
    out_msgs: Box<[libc::mmsghdr]>,
}

impl Batch {
    fn new() -> Batch {
        // SAFETY: all-zero is a valid value for these plain C structs.
        let zero_storage: libc::sockaddr_storage = unsafe { zeroed() };
        let zero_iov = libc::iovec {
            iov_base: std::ptr::null_mut(),
            iov_len: 0,
        };
        let zero_msg: libc::mmsghdr = unsafe { zeroed() };
        let mut batch = Batch {
            queries: vec![[0u8; MAX_QUERY]; BATCH].into_boxed_slice(),
            responses: vec![[0u8; MAX_RESPONSE]; BATCH].into_boxed_slice(),
            peers: vec![zero_storage; BATCH].into_boxed_slice(),
            in_iov: vec![zero_iov; BATCH].into_boxed_slice(),
            in_msgs: vec![zero_msg; BATCH].into_boxed_slice(),
            out_iov: vec![zero_iov; BATCH].into_boxed_slice(),
            out_msgs: vec![zero_msg; BATCH].into_boxed_slice(),
        };
        for i in 0..BATCH {
            batch.in_iov[i] = libc::iovec {
                iov_base: batch.queries[i].as_mut_ptr().cast(),
                iov_len: MAX_QUERY,
            };
            let hdr = &mut batch.in_msgs[i].msg_hdr;
            hdr.msg_name = (&mut batch.peers[i] as *mut libc::sockaddr_storage).cast();
            hdr.msg_iov = &mut batch.in_iov[i];
            hdr.msg_iovlen = 1;
        }
        batch
    }

    fn receive(&mut self, socket: &UdpSocket, flags: libc::c_int) -> io::Result<usize> {
        for msg in self.in_msgs.iter_mut() {
            msg.msg_hdr.msg_namelen = size_of::<libc::sockaddr_storage>() as libc::socklen_t;
            msg.msg_len = 0;
        }
        // SAFETY: in_msgs points at BATCH valid iovecs/sockaddr buffers owned by self, which
        // outlive the call; the kernel writes at most the lengths given.
        let n = unsafe {
            libc::recvmmsg(
                socket.as_raw_fd(),
                self.in_msgs.as_mut_ptr(),
                BATCH as libc::c_uint,
                flags,
                std::ptr::null_mut(),
            )
        };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(n as usize)
    }

    fn buffers(&mut self, i: usize) -> (&[u8], &mut [u8]) {
        (&self.queries[i], &mut self.responses[i])
    }

    fn peer(&self, i: usize) -> Option<SocketAddr> {
        sockaddr_to_std(&self.peers[i], self.in_msgs[i].msg_hdr.msg_namelen)
    }

    /// Queues response `i` (of `len` bytes) as the `slot`-th message to send.
    fn stage_reply(&mut self, i: usize, slot: usize, len: usize) {
        self.out_iov[slot] = libc::iovec {
            iov_base: self.responses[i].as_mut_ptr().cast(),
            iov_len: len,
        };
        let hdr = &mut self.out_msgs[slot].msg_hdr;
        hdr.msg_name = (&mut self.peers[i] as *mut libc::sockaddr_storage).cast();
        hdr.msg_namelen = self.in_msgs[i].msg_hdr.msg_namelen;
        hdr.msg_iov = &mut self.out_iov[slot];
        hdr.msg_iovlen = 1;
    }

    fn send(&mut self, socket: &UdpSocket, count: usize) {
        let mut sent = 0;
        // A failed datagram (e.g. an unreachable peer) must not hold back the rest of the batch.
        while sent < count {
            // SAFETY: out_msgs[sent..count] were staged with pointers into buffers owned by self.
            let n = unsafe {
                libc::sendmmsg(
                    socket.as_raw_fd(),
                    self.out_msgs[sent..].as_mut_ptr(),
                    (count - sent) as libc::c_uint,
                    0,
                )
            };
            if n <= 0 {
                let err = io::Error::last_os_error();
                if err.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                crate::metrics::serving().record_udp_send_error();
                sent += 1; // skip the datagram the kernel refused
            } else {
                sent += n as usize;
            }
        }
    }
}

fn sockaddr_to_std(storage: &libc::sockaddr_storage, len: libc::socklen_t) -> Option<SocketAddr> {
    match storage.ss_family as libc::c_int {
        libc::AF_INET if len as usize >= size_of::<libc::sockaddr_in>() => {
            // SAFETY: family and length say this storage holds a sockaddr_in.
            let sin =
                unsafe { &*(storage as *const libc::sockaddr_storage).cast::<libc::sockaddr_in>() };
            let ip = Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr));
            Some(SocketAddr::new(IpAddr::V4(ip), u16::from_be(sin.sin_port)))
        }
        libc::AF_INET6 if len as usize >= size_of::<libc::sockaddr_in6>() => {
            // SAFETY: family and length say this storage holds a sockaddr_in6.
            let sin6 = unsafe {
                &*(storage as *const libc::sockaddr_storage).cast::<libc::sockaddr_in6>()
            };
            let ip = Ipv6Addr::from(sin6.sin6_addr.s6_addr);
            Some(SocketAddr::new(
                IpAddr::V6(ip),
                u16::from_be(sin6.sin6_port),
            ))
        }
        _ => None,
    }
}
