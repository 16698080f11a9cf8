//! The sampled query log (`[server] query_log_sample = N`): one query in N is logged at info
//! with client, name, type, rcode and transport. Whether a query is sampled is a per-thread
//! countdown — no lock, no allocation; only the sampled query's log line allocates.

use std::cell::Cell;

use super::serving::{rcode_bucket, RCODES};
use crate::dns::wire::{display_wire_name, Query};
use crate::dns::wire::{Requester, Transport};

thread_local! {
    static COUNTDOWN: Cell<u32> = const { Cell::new(0) };
}

/// True for one call in `every` on this thread (the first one included); never for 0.
#[inline]
pub fn sampled(every: u32) -> bool {
    if every == 0 {
        return false;
    }
    COUNTDOWN
        .try_with(|left| {
            let n = left.get();
            if n <= 1 {
                left.set(every);
                true
            } else {
                left.set(n - 1);
                false
            }
        })
        .unwrap_or(false)
}

/// Logs one sampled query (allocates: only ever called for sampled ones).
#[cold]
pub fn log(client: &Requester, query: &Query, rcode: u16) {
    let transport = match client.transport {
        Transport::Udp => "udp",
        Transport::Tcp => "tcp",
        Transport::Tls => "tls",
        Transport::Https => "https",
        Transport::Quic => "quic",
    };
    let rcode = RCODES[rcode_bucket(rcode)];
    tracing::info!(
        target: "steerdns::query",
        client = %client.addr,
        transport,
        name = %display_wire_name(query.qname.as_wire()),
        qtype = %hickory_proto::rr::RecordType::from(query.qtype),
        rcode,
        "query"
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_in_n_is_sampled() {
        std::thread::spawn(|| {
            let picks: Vec<bool> = (0..9).map(|_| sampled(3)).collect();
            assert_eq!(
                picks,
                [true, false, false, true, false, false, true, false, false]
            );
            assert!((0..10).all(|_| !sampled(0)));
            assert!((0..5).all(|_| sampled(1)));
        })
        .join()
        .unwrap_or_else(|_| panic!("sampling thread panicked"));
    }
}
