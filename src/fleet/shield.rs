//! The fleet shield's etcd task: after every shield tick it writes what the tick left in the
//! outbox ([`crate::shield::link`]) and reads back what the shield needs, in one transaction:
//! this node's report (on its lease), a feed received here, the leader key, the freshest load
//! and the published state, and — on the leader — every node's report. The leader's proposed
//! state is written by compare-and-swap on the leader key's lease, so a node that lost the
//! key can never overwrite its successor's state. The first node to create the leader key on
//! its lease leads (the rollout coordinator's create-if-absent claim, [`super::claim`]); when
//! it dies the lease expires (`lease_ttl_secs`) and the next exchange of another node takes it.
//!
//! Moves bytes only: every check and decision is the shield's (`crate::shield::live`). When
//! etcd fails, the task says so in the inbox (the shield then serves fail-static) and starts
//! over with backoff.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::{Duration, Instant};

use etcd_client::{Client, Compare, CompareOp, GetOptions, PutOptions, Txn, TxnOp, TxnOpResponse};

use super::client::{grant_lease, Lease};
use super::session::{keep_every, Attempt, Link, Reconnect};
use super::{FleetError, Keys};
use crate::config::fleet::FleetConfig;
use crate::shield::link::{Outbox, Stored};
use crate::shield::live::Shield;

/// Longest wait for a tick before exchanging anyway (keeps the lease and the inbox fresh if
/// the shield's thread stalls).
const IDLE: Duration = Duration::from_secs(1);

struct Ctx {
    config: FleetConfig,
    link: Arc<Link>,
    keys: Keys,
    name: String,
    shield: Arc<Shield>,
}

/// The fleet shield task of node `name`, on the node's `link`.
pub fn task(
    link: Arc<Link>,
    name: String,
    shield: Arc<Shield>,
) -> impl std::future::Future<Output = ()> {
    let config = link.config().clone();
    let ctx = Ctx {
        keys: Keys::new(&config.prefix),
        config,
        link,
        name,
        shield,
    };
    run(ctx)
}

async fn run(ctx: Ctx) {
    let mut reconnect = Reconnect::default();
    let mut own = super::OwnLeases::default();
    loop {
        let mut attempt = reconnect.attempt();
        let part = ctx
            .link
            .session(|client| session(&ctx, client, &mut attempt, &mut own));
        let error = super::ended(part.await);
        tracing::debug!("fleet shield: {error}; retrying");
        ctx.shield.fleet.lost(error.to_string());
        reconnect.wait(&attempt).await;
    }
}

async fn timed<T, E: Into<FleetError>>(
    ctx: &Ctx,
    what: &str,
    future: impl std::future::Future<Output = Result<T, E>>,
) -> Result<T, FleetError> {
    super::within(&ctx.config, what, future).await
}

/// One connection's life; ends only with why it ended.
async fn session(
    ctx: &Ctx,
    mut client: Client,
    attempt: &mut Attempt,
    own: &mut super::OwnLeases,
) -> Result<Infallible, FleetError> {
    let Lease {
        id: lease,
        mut keeper,
        mut keepalives,
    } = grant_lease(&ctx.config, &mut client, "a lease").await?;
    attempt.connected();
    let earlier = own.clone();
    own.add(lease);
    let keep_every = keep_every(&ctx.config);
    let mut kept = Instant::now();
    let mut leading = false;
    loop {
        tokio::select! {
            _ = ctx.shield.fleet.filled.notified() => {}
            _ = tokio::time::sleep(IDLE) => {}
        }
        if kept.elapsed() >= keep_every {
            timed(ctx, "keeping the lease", keeper.keep_alive()).await?;
            match timed(ctx, "keeping the lease", keepalives.message()).await? {
                Some(answer) if answer.ttl() > 0 => kept = Instant::now(),
                _ => return Err(FleetError::Other("the shield's lease expired".into())),
            }
        }
        let outbox = ctx.shield.fleet.take_outbox();
        let session = Session {
            lease,
            earlier: earlier.all(),
        };
        match exchange(ctx, &mut client, &session, &mut leading, &outbox).await {
            Ok(()) => {}
            Err(e) => {
                ctx.shield.fleet.put_back(outbox);
                return Err(e);
            }
        }
    }
}

/// This session's lease and the process's earlier ones (see [`super::put_claimed`]).
struct Session<'a> {
    lease: i64,
    earlier: &'a [i64],
}

/// What one read found.
#[derive(Default)]
struct Found {
    leader: Option<String>,
    /// The leader key's lease (0: on none, written by hand).
    leader_lease: i64,
    load: Option<Stored>,
    state: Option<Stored>,
    reports: Vec<(String, Vec<u8>)>,
}

/// One exchange: write the outbox, read the shield's keys, campaign if nobody leads.
async fn exchange(
    ctx: &Ctx,
    client: &mut Client,
    session: &Session<'_>,
    leading: &mut bool,
    outbox: &Outbox,
) -> Result<(), FleetError> {
    let keys = &ctx.keys;
    let lease = session.lease;
    if let (Some(state), true) = (&outbox.state, *leading) {
        // Only while the leader key is still on this session's lease.
        let txn = Txn::new()
            .when([Compare::lease(
                keys.shield_leader(),
                CompareOp::Equal,
                lease,
            )])
            .and_then([TxnOp::put(keys.shield_state(), state.clone(), None)]);
        if !timed(ctx, "publishing the shield state", client.txn(txn))
            .await?
            .succeeded()
        {
            tracing::warn!("fleet shield: no longer the leader; state not published");
            *leading = false;
        }
    }
    let mut found = read(ctx, client, lease, outbox, *leading).await?;
    // Judged by the key's lease, not its value: another process with this node's name holds
    // it on its own lease and does not count as this one.
    let held_here = found.leader.is_some() && found.leader_lease == lease;
    *leading = *leading && held_here;
    let free = found.leader.is_none()
        || found.leader_lease == 0
        || session.earlier.contains(&found.leader_lease)
        || (held_here && !*leading);
    if free && ctx.shield.fleet.can_lead() {
        *leading = super::claim(
            &ctx.config,
            client,
            &keys.shield_leader(),
            &ctx.name,
            lease,
            session.earlier,
        )
        .await?;
        if *leading {
            tracing::info!("fleet shield: {} leads", ctx.name);
            found.leader = Some(ctx.name.clone());
            found.reports = reports(ctx, client).await?;
        }
    }
    let leads = *leading;
    ctx.shield.fleet.deliver(|inbox| {
        inbox.leader = found.leader;
        inbox.leading = leads;
        inbox.contact = Some(Instant::now());
        inbox.state = found.state;
        inbox.load = found.load;
        inbox.reports = found.reports;
        inbox.error = None;
    });
    Ok(())
}

/// Writes the report and a shared feed, and reads the shield's keys, in one transaction.
async fn read(
    ctx: &Ctx,
    client: &mut Client,
    lease: i64,
    outbox: &Outbox,
    leading: bool,
) -> Result<Found, FleetError> {
    let keys = &ctx.keys;
    let mut ops = Vec::new();
    if let Some(report) = &outbox.report {
        let options = PutOptions::new().with_lease(lease);
        ops.push(TxnOp::put(
            keys.shield_node(&ctx.name),
            report.clone(),
            Some(options),
        ));
    }
    if let Some(load) = &outbox.load {
        // No lease: the fleet's freshest feed outlives the node that received it.
        ops.push(TxnOp::put(keys.shield_load(), load.clone(), None));
    }
    let reads = ops.len();
    ops.push(TxnOp::get(keys.shield_leader(), None));
    ops.push(TxnOp::get(keys.shield_load(), None));
    ops.push(TxnOp::get(keys.shield_state(), None));
    if leading {
        ops.push(TxnOp::get(
            keys.shield_nodes_dir(),
            Some(GetOptions::new().with_prefix()),
        ));
    }
    let response = timed(
        ctx,
        "exchanging shield state",
        client.txn(Txn::new().and_then(ops)),
    )
    .await?;
    let mut gets = response
        .op_responses()
        .into_iter()
        .skip(reads)
        .map(|op| match op {
            TxnOpResponse::Get(get) => Some(get),
            _ => None,
        });
    let mut next = || gets.next().flatten();
    let stored = |get: Option<etcd_client::GetResponse>| {
        let kv = get?.kvs().first()?.clone();
        Some(Stored {
            revision: kv.mod_revision(),
            bytes: kv.value().to_vec(),
        })
    };
    let (leader, leader_lease) = next()
        .and_then(|get| {
            let kv = get.kvs().first()?;
            Some((
                Some(String::from_utf8_lossy(kv.value()).into_owned()),
                kv.lease(),
            ))
        })
        .unwrap_or((None, 0));
    let load = stored(next());
    let state = stored(next());
    let reports = if leading {
        next().map_or_else(Vec::new, |get| reports_of(keys, &get))
    } else {
        Vec::new()
    };
    Ok(Found {
        leader,
        leader_lease,
        load,
        state,
        reports,
    })
}

/// Every node's report (for a leader that just took the key).
async fn reports(ctx: &Ctx, client: &mut Client) -> Result<Vec<(String, Vec<u8>)>, FleetError> {
    let options = GetOptions::new().with_prefix();
    let get = timed(
        ctx,
        "reading the shield reports",
        client.get(ctx.keys.shield_nodes_dir(), Some(options)),
    )
    .await?;
    Ok(reports_of(&ctx.keys, &get))
}

fn reports_of(keys: &Keys, get: &etcd_client::GetResponse) -> Vec<(String, Vec<u8>)> {
    let dir = keys.shield_nodes_dir();
    get.kvs()
        .iter()
        .filter_map(|kv| {
            let name = kv.key_str().ok()?.strip_prefix(&dir)?.to_string();
            Some((name, kv.value().to_vec()))
        })
        .collect()
}
