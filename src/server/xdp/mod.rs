//! The AF_XDP path (`[server.xdp]`): UDP queries to our ports are taken from the interface
//! before the kernel's IP and UDP stack, answered by the same responder as the socket path,
//! and sent back from the frame they arrived in. Everything else (TCP, ARP/ND, the admin
//! endpoint, other ports, IP fragments, IPv6 with extension headers) passes to the kernel.
//!
//! - [`bpf`]: the XDP program (assembled here, no BPF toolchain needed) and its attachment;
//! - [`xsk`]: one AF_XDP socket with its UMEM and rings per receive queue;
//! - [`frame`]: Ethernet/IP/UDP headers: parse, turn into the reply, checksums.
//!
//! The path is an addition, never a dependency: the UDP sockets stay bound, so if XDP cannot
//! attach (no privileges, no such interface, the driver refuses) the server says why (log,
//! status, metrics) and serves on its sockets exactly as without `[server.xdp]`.

pub mod bpf;
pub mod frame;
pub mod xsk;

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::respond_or_notify;
use crate::config::{XdpAttach, XdpConfig};
use crate::dns::wire::{Requester, Transport};
use crate::metrics::xdp::{QueueCounters, XdpView};
use crate::snapshot::SharedSnapshot;
use bpf::AttachMode;
use frame::Datagram;
use xsk::{XskSocket, FRAME_SIZE};

/// Frames taken from the RX ring per round.
const BATCH: u32 = 64;
/// How long an idle worker sleeps in poll before looking at the stop flag.
const IDLE_POLL_MS: i32 = 250;
/// Largest DNS response the responder may write (its UDP maximum).
const MAX_RESPONSE: usize = 4096;
/// How often the kernel's socket statistics are copied into our counters.
const KERNEL_STATS_EVERY: Duration = Duration::from_millis(500);

#[derive(Debug, thiserror::Error)]
pub enum XdpError {
    #[error("interface {interface}: {source}")]
    Interface {
        interface: String,
        source: io::Error,
    },
    #[error("interface {interface} has no receive queue {queue} (it has {available})")]
    NoSuchQueue {
        interface: String,
        queue: u32,
        available: u32,
    },
    #[error("creating the XSKMAP: {0}")]
    Map(io::Error),
    #[error("loading the XDP program: {0}")]
    Program(io::Error),
    #[error("attaching to {interface} ({mode}): {source}")]
    Attach {
        interface: String,
        mode: &'static str,
        source: io::Error,
    },
    #[error("AF_XDP socket on queue {queue}: {source}")]
    Socket { queue: u32, source: io::Error },
    #[error("worker thread: {0}")]
    Thread(io::Error),
}

/// The running XDP path: the attached program (detached when this is dropped) and one worker
/// per queue.
pub struct XdpPath {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
    // Dropped after the workers stopped: closing the link detaches the program.
    _link: OwnedFd,
    _program: OwnedFd,
    _map: OwnedFd,
}

impl XdpPath {
    /// Attaches and starts serving; on any failure records why in status and returns `None`
    /// (the sockets keep serving).
    pub fn start_or_report(
        config: &XdpConfig,
        ports: Vec<u16>,
        snapshot: &SharedSnapshot,
    ) -> Option<XdpPath> {
        let mut view = XdpView {
            interface: config.interface.clone(),
            ports: ports.clone(),
            ..XdpView::default()
        };
        match XdpPath::start(config, &ports, snapshot) {
            Ok((path, started)) => {
                tracing::info!(
                    "xdp: serving UDP ports {:?} on {} ({}, {}) with {} queue(s)",
                    ports,
                    config.interface,
                    started.attach.as_str(),
                    started.copy_mode,
                    started.queues.len()
                );
                view.attach = Some(started.attach.as_str().to_string());
                view.copy_mode = Some(started.copy_mode.to_string());
                crate::metrics::xdp::register(view, started.queues);
                Some(path)
            }
            Err(e) => {
                tracing::warn!("xdp: not serving, UDP stays on sockets: {e}");
                view.error = Some(e.to_string());
                crate::metrics::xdp::register(view, Vec::new());
                None
            }
        }
    }

    fn start(
        config: &XdpConfig,
        ports: &[u16],
        snapshot: &SharedSnapshot,
    ) -> Result<(XdpPath, Started), XdpError> {
        let interface = &config.interface;
        let ifindex = interface_index(interface).map_err(|source| XdpError::Interface {
            interface: interface.clone(),
            source,
        })?;
        let available = receive_queues(interface);
        let queues: Vec<u32> = match &config.queues {
            Some(list) => list.clone(),
            None => (0..available).collect(),
        };
        if let Some(&queue) = queues.iter().find(|&&q| q >= available) {
            return Err(XdpError::NoSuchQueue {
                interface: interface.clone(),
                queue,
                available,
            });
        }
        let map = bpf::create_socket_map(available).map_err(XdpError::Map)?;
        let program =
            bpf::load_program(&bpf::program(ports, map.as_raw_fd())).map_err(XdpError::Program)?;
        // Sockets first, then the program: a frame redirected to a queue with no socket yet
        // would go to the kernel anyway, but this way the first query is already ours.
        let mut sockets = Vec::new();
        for &queue in &queues {
            let socket = XskSocket::open(ifindex, queue, config.zero_copy)
                .map_err(|source| XdpError::Socket { queue, source })?;
            bpf::set_queue_socket(&map, queue, socket.raw_fd())
                .map_err(|source| XdpError::Socket { queue, source })?;
            sockets.push((queue, socket));
        }
        let (link, attach) = attach(&program, ifindex, config)?;
        let copy_mode = sockets
            .first()
            .map_or("copy", |(_, s)| s.mode.as_str())
            .to_string();
        let mtu = interface_mtu(interface);
        let stop = Arc::new(AtomicBool::new(false));
        let mut threads = Vec::new();
        let mut counters = Vec::new();
        for (queue, socket) in sockets {
            let queue_counters = Arc::new(QueueCounters::default());
            counters.push((queue, queue_counters.clone()));
            let worker = Worker {
                socket,
                mtu,
                snapshot: snapshot.clone(),
                counters: queue_counters,
                stop: stop.clone(),
            };
            let thread = std::thread::Builder::new()
                .name(format!("xdp-{queue}"))
                .spawn(move || worker.run())
                .map_err(XdpError::Thread)?;
            threads.push(thread);
        }
        let path = XdpPath {
            stop,
            threads,
            _link: link,
            _program: program,
            _map: map,
        };
        let started = Started {
            attach,
            copy_mode,
            queues: counters,
        };
        Ok((path, started))
    }

    /// Stops the workers and detaches the program.
    pub fn stop(self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads {
            let _ = t.join();
        }
    }
}

struct Started {
    attach: AttachMode,
    copy_mode: String,
    queues: Vec<(u32, Arc<QueueCounters>)>,
}

/// Attaches in the configured mode; `auto` tries the driver first, then generic.
fn attach(
    program: &OwnedFd,
    ifindex: u32,
    config: &XdpConfig,
) -> Result<(OwnedFd, AttachMode), XdpError> {
    let modes: &[AttachMode] = match config.attach {
        XdpAttach::Auto => &[AttachMode::Native, AttachMode::Generic],
        XdpAttach::Native => &[AttachMode::Native],
        XdpAttach::Generic => &[AttachMode::Generic],
    };
    let mut last = None;
    for &mode in modes {
        match bpf::attach(program, ifindex, mode) {
            Ok(link) => return Ok((link, mode)),
            Err(source) => last = Some((mode, source)),
        }
    }
    let (mode, source) = last.unwrap_or((AttachMode::Generic, io::Error::other("no mode")));
    Err(XdpError::Attach {
        interface: config.interface.clone(),
        mode: mode.as_str(),
        source,
    })
}

fn interface_index(name: &str) -> io::Result<u32> {
    let c = CString::new(name).map_err(|_| io::Error::other("name contains a NUL byte"))?;
    // SAFETY: a valid NUL-terminated string.
    let index = unsafe { libc::if_nametoindex(c.as_ptr()) };
    if index == 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(index)
    }
}

/// Receive queues of an interface, from sysfs (1 if it cannot be read).
fn receive_queues(interface: &str) -> u32 {
    let dir = format!("/sys/class/net/{interface}/queues");
    let count = std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .filter_map(Result::ok)
                .filter(|e| e.file_name().to_string_lossy().starts_with("rx-"))
                .count()
        })
        .unwrap_or(0);
    u32::try_from(count).unwrap_or(1).max(1)
}

/// Largest DNS payload that fits the link without IP fragmentation and the `space` left in
/// the frame from where `datagram` starts.
fn payload_room(interface_mtu: usize, datagram: &Datagram, space: usize) -> usize {
    let ip_and_udp = datagram.header_len - 14;
    interface_mtu
        .saturating_sub(ip_and_udp)
        .min(space.saturating_sub(datagram.header_len))
}

fn interface_mtu(interface: &str) -> usize {
    std::fs::read_to_string(format!("/sys/class/net/{interface}/mtu"))
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(1500)
}

/// One queue's worker: RX ring → responder → the same frame on the TX ring.
struct Worker {
    socket: XskSocket,
    /// The interface's MTU: replies never exceed it (we cannot fragment).
    mtu: usize,
    snapshot: SharedSnapshot,
    counters: Arc<QueueCounters>,
    stop: Arc<AtomicBool>,
}

impl Worker {
    fn run(mut self) {
        crate::metrics::claim_worker_slot();
        let mtu = self.mtu;
        let mut response = vec![0u8; MAX_RESPONSE].into_boxed_slice();
        let mut stats_copied = Instant::now();
        while !self.stop.load(Ordering::Relaxed) {
            self.socket.reclaim();
            self.socket.refill();
            let n = self.socket.received(BATCH);
            if n == 0 {
                self.flush_tx(0);
                self.socket.wait(IDLE_POLL_MS);
            } else {
                let sent = self.answer_batch(n, mtu, &mut response);
                self.socket.release_rx(n);
                self.send_or_defer(sent);
            }
            // The kernel's counters cost a getsockopt: copied on a clock, not per round.
            if stats_copied.elapsed() >= KERNEL_STATS_EVERY {
                self.copy_kernel_stats();
                stats_copied = Instant::now();
            }
        }
        self.copy_kernel_stats();
    }

    /// Sends this round's `sent` replies, or, in copy mode with more queries already waiting
    /// and less than a kick's worth pending, leaves them published for the next round's kick:
    /// each copy-mode kick is a syscall sending at most [`xsk::TX_KICK_BATCH`] frames, so a
    /// worker that is behind sends full kicks instead of one per round. Never deferred past a
    /// round: the next one runs at once, and an empty RX ring flushes.
    fn send_or_defer(&mut self, sent: u32) {
        let behind = self.socket.mode == xsk::CopyMode::Copy && self.socket.received(1) > 0;
        // Pending counts this round's replies too: they are on the ring, not yet published.
        if behind && self.socket.tx_pending() < xsk::TX_KICK_BATCH {
            self.socket.publish_tx(sent);
        } else {
            self.flush_tx(sent);
        }
    }

    fn flush_tx(&mut self, queued: u32) {
        let kicks = self.socket.flush_tx(queued);
        QueueCounters::add(&self.counters.tx_kicks, u64::from(kicks));
    }

    /// Answers `n` received frames; returns how many replies were queued.
    fn answer_batch(&mut self, n: u32, mtu: usize, response: &mut [u8]) -> u32 {
        let snapshot = self.snapshot.load();
        let mut queued = 0;
        let mut room = self.socket.tx_room();
        for i in 0..n {
            let desc = self.socket.rx_desc(i);
            QueueCounters::add(&self.counters.rx, 1);
            let reply_len = match self.socket.frame_mut(desc.addr) {
                Some(frame) => {
                    let offset = (desc.addr as usize) & (FRAME_SIZE - 1);
                    let end = (offset + desc.len as usize).min(FRAME_SIZE);
                    answer_frame(&snapshot, frame, offset, end, mtu, response)
                }
                None => None,
            };
            match reply_len {
                Some(len) if room > 0 => {
                    self.socket.transmit(desc.addr, len as u32);
                    room -= 1;
                    queued += 1;
                }
                Some(_) => {
                    QueueCounters::add(&self.counters.tx_ring_full, 1);
                    QueueCounters::add(&self.counters.dropped, 1);
                    self.socket.recycle(desc.addr);
                }
                None => {
                    QueueCounters::add(&self.counters.dropped, 1);
                    self.socket.recycle(desc.addr);
                }
            }
        }
        QueueCounters::add(&self.counters.tx, u64::from(queued));
        queued
    }

    fn copy_kernel_stats(&self) {
        let k = self.socket.kernel_stats();
        let c = &self.counters;
        c.rx_ring_full.store(k.rx_ring_full, Ordering::Relaxed);
        c.fill_ring_empty
            .store(k.rx_fill_ring_empty_descs, Ordering::Relaxed);
        c.kernel_rx_dropped.store(k.rx_dropped, Ordering::Relaxed);
    }
}

/// Answers the query in `frame[offset..end]` in place: the reply is written where the query
/// arrived and sent from there (moving it to the frame's start first would write two more
/// cache lines of a frame the kernel just filled on another CPU); returns the reply's length.
fn answer_frame(
    snapshot: &crate::snapshot::Snapshot,
    frame: &mut [u8],
    offset: usize,
    end: usize,
    mtu: usize,
    response: &mut [u8],
) -> Option<usize> {
    let packet = frame.get_mut(offset..)?;
    let datagram = frame::parse(packet.get(..end.checked_sub(offset)?)?).ok()?;
    let query = &packet[datagram.header_len..datagram.header_len + datagram.payload_len];
    let client = Requester::new(datagram.source, Transport::Udp);
    let mut n = respond_or_notify(snapshot, query, &client, response)?;
    let room = payload_room(mtu, &datagram, packet.len());
    if n > room {
        // Too big for the link: the socket path would fragment; we answer TC so the client
        // comes back over TCP (through the kernel).
        n = frame::truncate_to_question(response, n).filter(|&t| t <= room)?;
    }
    packet[datagram.header_len..datagram.header_len + n].copy_from_slice(&response[..n]);
    Some(frame::turn_into_reply(packet, &datagram, n))
}
