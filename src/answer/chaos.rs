//! CHAOS-class queries: `version.bind`, `id.server` / `hostname.bind`, and (for permitted
//! clients) a trace of the steering decision for a name. Operators' tools, not the hot path:
//! they allocate.

use crate::dns::sent::Sent;
use crate::dns::wire::{class, flag, rcode, rtype, Query, Requester, WireName};
use crate::dns::writer::{Overflow, Writer};
use crate::policy;
use crate::snapshot::compose::{put_opt, write_simple};
use crate::snapshot::steer::locate;
use crate::snapshot::Snapshot;
use crate::zone::lookup::{resolve, SteeredAnswer, Steering, ZoneSet};
use crate::zone::model::SteeredBinding;

pub fn respond(
    snapshot: &Snapshot,
    packet: &[u8],
    query: &Query,
    client: &Requester,
    limit: usize,
    out: &mut [u8],
) -> Option<Sent> {
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

fn answer_text(snapshot: &Snapshot, query: &Query, client: &Requester) -> Option<String> {
    let name = query.qname.as_wire();
    let options = &snapshot.options();
    match name {
        b"\x07version\x04bind\x00" | b"\x07version\x06server\x00" => options.version.clone(),
        b"\x02id\x06server\x00" | b"\x08hostname\x04bind\x00" => options.identity.clone(),
        // For fleets: `for ns in ...; do dig @$ns CH TXT serial.steerdns; done` shows convergence.
        b"\x06serial\x08steerdns\x00" => Some(format!(
            "serial {} config {:016x}{}",
            snapshot.serial(),
            snapshot.config_hash(),
            if snapshot.local_override() {
                " local-override"
            } else {
                ""
            }
        )),
        _ => decision_trace(snapshot, query, client),
    }
}

/// A one-line explanation of how the steered name `query` asks for is decided for this
/// client (its ECS option, else its address), for permitted clients: where the client is,
/// the geo database's state, and each step of the policy.
fn decision_trace(snapshot: &Snapshot, query: &Query, client: &Requester) -> Option<String> {
    if !snapshot.may_trace(client.addr) {
        return None;
    }
    let data = snapshot.steering()?;
    let binding = first_binding(snapshot.zones(), &query.qname)?;
    let steered = data.policies.steered().get(binding.index())?;
    let subnet = query.edns.as_ref().and_then(|e| e.client_subnet.as_ref());
    let located = locate(&data.locator, client.addr, subnet);
    let source = match subnet {
        Some(ecs) if ecs.source_prefix > 0 => format!("ecs {}/{}", ecs.addr, ecs.source_prefix),
        _ => "source address".to_string(),
    };
    let location = data.locator.describe(located.addr);
    let database = match data.locator.degraded() {
        Some(reason) => format!("; geo database degraded: {reason}"),
        None => String::new(),
    };
    let tenants = snapshot.tenants().load();
    let tenant = tenants.get(query.qname.as_wire());
    let (policies, root) = match tenant {
        Some(tenant) => tenant.route(&data.policies, steered.root),
        None => (&data.policies, steered.root),
    };
    let as_tenant = tenant.map(|t| policy::AsTenant {
        name: t.name(),
        cells: t.cells(&data.policies),
    });
    let (shed, health) = (&snapshot.shield().view(), &snapshot.health().view());
    let own = tenant.and_then(|t| t.own_monitors());
    let own_view = own.map(|m| m.view());
    let own = own.zip(own_view.as_deref()).map(|(m, v)| (m.base, &**v));
    let decision =
        policy::explain_for_tenant_with_own(policies, root, &located, shed, health, as_tenant, own);
    Some(format!(
        "{} via {source}; {location}{database}; name {}; {}{decision}",
        located.addr,
        steered.name,
        tenant.map(tenant_line).unwrap_or_default()
    ))
}

/// What a trace says of the tenant owning the name: its served version.
fn tenant_line(tenant: &crate::tenant::ServedTenant) -> String {
    let answers = match (tenant.is_suspended(), tenant.has_own_profile()) {
        (true, _) => "suspended: answers REFUSED",
        (false, true) => "own profile",
        (false, false) => "platform policy",
    };
    format!(
        "tenant {} serial {} version {} ({answers}); ",
        tenant.name(),
        tenant.serial,
        tenant.version()
    )
}

/// The steering binding an A (else an AAAA) lookup of `qname` reaches first: the name's own,
/// its wildcard's, or one at the end of a CNAME chain. `None` outside our zones or when no
/// steered name is reached.
fn first_binding(zones: &ZoneSet, qname: &WireName) -> Option<SteeredBinding> {
    for qtype in [rtype::A, rtype::AAAA] {
        let mut asked = FirstAsked(None);
        resolve(zones, qname, qtype, &mut asked, false)?;
        if asked.0.is_some() {
            return asked.0;
        }
    }
    None
}

/// A steering hook that decides nothing and keeps the first binding the lookup asks about.
struct FirstAsked(Option<SteeredBinding>);

impl<'z> Steering<'z> for FirstAsked {
    fn steer(&mut self, binding: SteeredBinding, _: u16) -> Option<SteeredAnswer<'z>> {
        self.0.get_or_insert(binding);
        None
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
) -> Result<Sent, Overflow> {
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
    Ok(Sent {
        answers: true,
        ..Sent::empty(w.len(), rcode::NOERROR)
    })
}
