//! The static projection of a steered name: the one answer a server that cannot run the
//! policies (a secondary fed by a zone transfer) should give for it, whoever asks.
//!
//! Owns the choice, and nothing else: the always-serve answer of a root, from the compiled
//! policies with the control knobs already applied. Anycast names project the global anycast
//! addresses. A profile projects its always-serve endpoint (no monitor, enabled, and for a
//! weighted profile a weight above 0) with the highest effective weight; ties, and the
//! profiles without weights (geo, failover), go to the endpoint written first, so the choice
//! depends on the config and the knobs alone. A nested profile is followed the same way (at
//! most [`MAX_PROFILE_DEPTH`] deep); one that projects nothing lets the next endpoint in.
//! Health is never read: a transferred zone is static, and always-serve endpoints are the ones
//! that are served whatever a monitor says.

use super::evaluate::Target;
use super::model::{
    CompiledPolicies, Endpoint, EndpointTarget, PolicyRoot, Profile, ProfileId, ProfileKindTag,
    MAX_PROFILE_DEPTH,
};

/// A steered name's static answer: what it projects, and the TTL its records carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StaticAnswer<'a> {
    pub target: Target<'a>,
    /// The name's configured TTL: the anycast `ttl`, or the profile's TTL under the steered
    /// entry's cap ([`CompiledPolicies::ttl_bound`]).
    pub ttl: u32,
}

impl CompiledPolicies {
    /// The static answer of a steered name with this root; `None` when nothing is always
    /// served (every endpoint monitored, disabled or at weight 0, or no global address).
    pub fn static_answer(&self, root: PolicyRoot) -> Option<StaticAnswer<'_>> {
        let target = match root {
            PolicyRoot::Anycast { .. } => {
                let (v4, v6) = self.global();
                (!v4.is_empty() || !v6.is_empty()).then_some(Target::Addresses { v4, v6 })?
            }
            PolicyRoot::Profile { profile, .. } => self.profile_projection(profile, 0)?,
        };
        Some(StaticAnswer {
            target,
            ttl: self.ttl_bound(root),
        })
    }

    fn profile_projection(&self, id: ProfileId, depth: usize) -> Option<Target<'_>> {
        let profile = self.profile(id)?;
        ranked_always_serve(profile)
            .into_iter()
            .find_map(|endpoint| match &endpoint.target {
                EndpointTarget::Addresses { v4, v6 } => Some(Target::Addresses { v4, v6 }),
                EndpointTarget::Cname { name, wire } => Some(Target::Cname { name, wire }),
                EndpointTarget::Profile(next) if depth < MAX_PROFILE_DEPTH => {
                    self.profile_projection(*next, depth + 1)
                }
                EndpointTarget::Profile(_) => None,
            })
    }
}

/// A profile's always-serve candidates, best first: highest effective weight (weighted
/// profiles), then the order written.
fn ranked_always_serve(profile: &Profile) -> Vec<&Endpoint> {
    let mut ranked: Vec<(usize, &Endpoint)> = profile
        .candidates
        .iter()
        .filter_map(|&i| {
            profile
                .endpoints
                .get(usize::from(i))
                .map(|e| (usize::from(i), e))
        })
        .filter(|(_, e)| e.monitor.is_none() && e.enabled && !e.hidden)
        .collect();
    let weighted = profile.kind == ProfileKindTag::Weighted;
    ranked.sort_by_key(|&(i, e)| (std::cmp::Reverse(if weighted { e.weight } else { 0 }), i));
    ranked.into_iter().map(|(_, e)| e).collect()
}
