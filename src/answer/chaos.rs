//! CHAOS-class queries: `version.bind`, `id.server` / `hostname.bind`, and (for permitted
//! clients) a trace of the steering decision for a name. Operators' tools, not the hot path.

use crate::dns::wire::{class, flag, rcode, rtype, Client, Query};
use crate::dns::writer::{Overflow, Writer};
use crate::snapshot::compose::{put_opt, write_simple};
use crate::snapshot::Snapshot;

pub fn respond(
    snapshot: &Snapshot,
    packet: &[u8],
    query: &Query,
    client: &Client,
    limit: usize,
    out: &mut [u8],
) -> Option<usize> {
    let text = if query.qtype == rtype::TXT || query.qtype == rtype::ANY {
        answer_text(snapshot, query, client)
    } else {
        None
    };
    match text {
        Some(text) => write_txt(snapshot, packet, query, &text, limit, out)
            .ok()
            .or_else(|| {
                write_simple(
                    snapshot.options(),
                    packet,
                    query,
                    rcode::SERVFAIL,
                    limit,
                    out,
                )
                .ok()
            }),
        None => write_simple(
            snapshot.options(),
            packet,
            query,
            rcode::REFUSED,
            limit,
            out,
        )
        .ok(),
    }
}

fn answer_text(snapshot: &Snapshot, query: &Query, client: &Client) -> Option<String> {
    let name = query.qname.as_wire();
    let options = &snapshot.options();
    match name {
        b"\x07version\x04bind\x00" | b"\x07version\x06server\x00" => options.version.clone(),
        b"\x02id\x06server\x00" | b"\x08hostname\x04bind\x00" => options.identity.clone(),
        // For fleets: `for ns in ...; do dig @$ns CH TXT serial.steerdns; done` shows convergence.
        b"\x06serial\x08steerdns\x00" => Some(format!(
            "serial {} config {:016x}",
            snapshot.serial(),
            snapshot.config_hash()
        )),
        _ => snapshot.chaos_extra(
            &query.qname,
            client,
            query.edns.as_ref().and_then(|e| e.client_subnet.as_ref()),
        ),
    }
}

/// A TXT answer in class CH, split into 255-octet character strings.
fn write_txt(
    snapshot: &Snapshot,
    packet: &[u8],
    query: &Query,
    text: &str,
    limit: usize,
    out: &mut [u8],
) -> Result<usize, Overflow> {
    let mut w = Writer::new(&mut out[..limit])?;
    w.set_u16(0, query.id);
    w.set_u16(2, flag::QR | flag::AA | (query.flags & flag::RD));
    w.put_question(query.question_bytes(packet))?;
    w.set_u16(4, 1);
    w.put_question_pointer()?;
    w.put_u16(rtype::TXT)?;
    w.put_u16(class::CH)?;
    w.put_u32(0)?;
    let chunks: Vec<&[u8]> = text.as_bytes().chunks(255).collect();
    let rdlen: usize = chunks.iter().map(|c| c.len() + 1).sum::<usize>().max(1);
    w.put_u16(u16::try_from(rdlen).map_err(|_| Overflow)?)?;
    if chunks.is_empty() {
        w.put(&[0])?;
    }
    for chunk in chunks {
        w.put(&[chunk.len() as u8])?;
        w.put(chunk)?;
    }
    w.set_u16(6, 1);
    // A query with EDNS gets OPT back (RFC 6891 §7), CHAOS or not.
    if let Some(edns) = &query.edns {
        put_opt(&mut w, snapshot.options(), edns, rcode::NOERROR, 0)?;
        w.set_u16(10, 1);
    }
    Ok(w.len())
}
