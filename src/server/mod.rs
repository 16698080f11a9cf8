//! Sockets and threads: binding listen addresses (UDP and TCP on the same port, SO_REUSEPORT so
//! a new process can start beside an old one), the UDP worker threads ([`udp`]) and the TCP
//! service on the tokio runtime ([`tcp`]), the encrypted transports ([`encrypted`]), who may
//! transfer a zone out ([`xfr_acl`]) the transfers themselves ([`xfr_out`]) and NOTIFY out ([`notify`]), and who
//! of their clients gets a connection slot ([`admission`]).
//!
//! Owns no DNS logic: every packet goes to [`crate::answer::respond`] with the snapshot
//! loaded at that moment, but a NOTIFY to a secondary zone over UDP (sockets or XDP) or TCP,
//! which goes to [`crate::secondary::notify::answer`] ([`respond_or_notify`]).

pub mod admission;
pub mod encrypted;
pub mod notify;
pub mod tcp;
pub mod udp;
pub mod xdp;
pub mod xfr_acl;
pub mod xfr_out;

use std::io;
use std::net::{SocketAddr, TcpListener, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use socket2::{Domain, Protocol, Socket, Type};

use crate::snapshot::SharedSnapshot;

/// [`crate::answer::respond`], or for a NOTIFY (RFC 1996) the secondary zones' answer: the
/// query path proper has no opcode but QUERY. Neither locks nor does I/O.
pub fn respond_or_notify(
    snapshot: &crate::snapshot::Snapshot,
    packet: &[u8],
    client: &crate::dns::wire::Requester,
    out: &mut [u8],
) -> Option<usize> {
    if crate::secondary::notify::is_notify(packet) {
        return crate::secondary::notify::answer(packet, client.addr, out);
    }
    crate::answer::respond(snapshot, packet, client, out)
}

/// Receive buffer per UDP socket: room for bursts while a worker is busy.
const UDP_RECV_BUFFER: usize = 4 << 20;

#[derive(Debug, thiserror::Error)]
pub enum BindError {
    #[error("cannot listen on {addr}: {source}")]
    Io { addr: SocketAddr, source: io::Error },
    #[error("cannot find a port free for both UDP and TCP on {0}")]
    NoCommonPort(SocketAddr),
}

/// The sockets for one listen address: one UDP socket per worker, one TCP listener.
pub struct Bound {
    pub addr: SocketAddr,
    pub udp: Vec<UdpSocket>,
    pub tcp: TcpListener,
}

fn new_socket(addr: SocketAddr, ty: Type, protocol: Protocol) -> io::Result<Socket> {
    let socket = Socket::new(Domain::for_address(addr), ty, Some(protocol))?;
    socket.set_reuse_port(true)?;
    socket.set_reuse_address(true)?;
    if addr.is_ipv6() {
        socket.set_only_v6(true)?;
    }
    Ok(socket)
}

fn bind_udp(addr: SocketAddr) -> io::Result<UdpSocket> {
    let socket = new_socket(addr, Type::DGRAM, Protocol::UDP)?;
    let _ = socket.set_recv_buffer_size(UDP_RECV_BUFFER);
    socket.bind(&addr.into())?;
    Ok(socket.into())
}

/// A TCP listener of its own on `addr` (DoT, DoH), non-blocking for tokio.
pub fn bind_stream(addr: SocketAddr) -> Result<TcpListener, BindError> {
    bind_tcp(addr).map_err(|source| BindError::Io { addr, source })
}

/// A UDP socket of its own on `addr` (DoQ), non-blocking for tokio.
pub fn bind_datagram(addr: SocketAddr) -> Result<UdpSocket, BindError> {
    let socket = bind_udp(addr).map_err(|source| BindError::Io { addr, source })?;
    socket
        .set_nonblocking(true)
        .map_err(|source| BindError::Io { addr, source })?;
    Ok(socket)
}

fn bind_tcp(addr: SocketAddr) -> io::Result<TcpListener> {
    let socket = new_socket(addr, Type::STREAM, Protocol::TCP)?;
    socket.bind(&addr.into())?;
    socket.listen(1024)?;
    socket.set_nonblocking(true)?;
    Ok(socket.into())
}

/// Binds `workers` UDP sockets and one TCP listener on `addr`. Port 0 picks a port free for
/// both protocols.
pub fn bind(addr: SocketAddr, workers: usize) -> Result<Bound, BindError> {
    let io_err = |source| BindError::Io { addr, source };
    let attempts = if addr.port() == 0 { 32 } else { 1 };
    for _ in 0..attempts {
        let first = bind_udp(addr).map_err(io_err)?;
        let actual = first.local_addr().map_err(io_err)?;
        let tcp = match bind_tcp(actual) {
            Ok(tcp) => tcp,
            Err(_) if addr.port() == 0 => continue,
            Err(e) => return Err(io_err(e)),
        };
        let mut udp = vec![first];
        for _ in 1..workers.max(1) {
            udp.push(bind_udp(actual).map_err(io_err)?);
        }
        return Ok(Bound {
            addr: actual,
            udp,
            tcp,
        });
    }
    Err(BindError::NoCommonPort(addr))
}

/// A running set of UDP workers; dropping it does not stop them, [`UdpWorkers::stop`] does.
pub struct UdpWorkers {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
}

impl UdpWorkers {
    pub fn start(sockets: Vec<UdpSocket>, snapshot: &SharedSnapshot) -> io::Result<UdpWorkers> {
        let stop = Arc::new(AtomicBool::new(false));
        let mut threads = Vec::new();
        for (i, socket) in sockets.into_iter().enumerate() {
            let snapshot = snapshot.clone();
            let stop = stop.clone();
            let thread = std::thread::Builder::new()
                .name(format!("udp-{i}"))
                .spawn(move || {
                    if let Err(e) = udp::run_worker(socket, snapshot, stop) {
                        tracing::error!("udp worker {i} stopped: {e}");
                    }
                })?;
            threads.push(thread);
        }
        Ok(UdpWorkers { stop, threads })
    }

    /// Asks every worker to stop and waits for them (they wake at least every 250 ms).
    pub fn stop(self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads {
            let _ = t.join();
        }
    }
}
