//! Pre-signed steered answers: for every steered name, every address set and CNAME target its
//! policy can answer with ([`CompiledPolicies::possible_targets`]), signed ahead of time. The
//! serving path finds the signature of the answer it chose by comparing the few variants of
//! that name (no allocation, no signing).

use std::net::{Ipv4Addr, Ipv6Addr};

use super::keys::{Key, KeyError};
use super::sign::{rrset, sign_set, Window};
use super::zone::SteeredTypes;
use crate::dns::wire::rtype;
use crate::policy::{CompiledPolicies, Target};
use crate::zone::lookup::{Addresses, SteeredData};
use crate::zone::model::{RRset, SteeredBinding};

enum Variant {
    V4(Box<[Ipv4Addr]>),
    V6(Box<[Ipv6Addr]>),
    Cname(Box<[u8]>),
}

/// Signatures of every steered answer, by steered binding.
#[derive(Default)]
pub struct SteeredSigs {
    by_binding: Vec<Vec<(Variant, RRset)>>,
    /// How many variants were signed.
    pub variants: usize,
}

/// Where a steered name sits: its owner name (wire; `*.x` for a wildcard), the apex of the
/// signed zone it is in, that zone's active zone-signing keys and its signature window.
pub struct SteeredOwner<'k> {
    pub owner: Box<[u8]>,
    pub apex: Box<[u8]>,
    pub keys: Vec<&'k Key>,
    pub window: Window,
}

impl SteeredSigs {
    /// Signs every possible answer of every steered binding whose owner is given (bindings in
    /// unsigned zones get `None` and no signatures).
    pub fn build(
        policies: &CompiledPolicies,
        owners: &[Option<SteeredOwner<'_>>],
    ) -> Result<SteeredSigs, KeyError> {
        let mut sigs = SteeredSigs::default();
        for (steered, owner) in policies.steered().iter().zip(owners) {
            let mut variants: Vec<(Variant, RRset)> = Vec::new();
            if let Some(owner) = owner {
                let ttl = policies.ttl_bound(steered.root);
                let mut sign =
                    |variant: Variant, rt: u16, rdatas: Vec<Vec<u8>>| -> Result<(), KeyError> {
                        let exists = variants.iter().any(|(v, _)| match (v, &variant) {
                            (Variant::V4(a), Variant::V4(b)) => a == b,
                            (Variant::V6(a), Variant::V6(b)) => a == b,
                            (Variant::Cname(a), Variant::Cname(b)) => a == b,
                            _ => false,
                        });
                        if exists {
                            return Ok(());
                        }
                        let slices: Vec<&[u8]> = rdatas.iter().map(Vec::as_slice).collect();
                        let set = rrset(rt, ttl, &slices);
                        if let Some(sig) =
                            sign_set(&owner.keys, &owner.apex, &owner.owner, &set, &owner.window)?
                        {
                            variants.push((variant, sig));
                        }
                        Ok(())
                    };
                for target in policies.possible_targets(steered.root) {
                    match target {
                        Target::Addresses { v4, v6 } => {
                            if !v4.is_empty() {
                                let rdatas = v4.iter().map(|a| a.octets().to_vec()).collect();
                                sign(Variant::V4(v4.into()), rtype::A, rdatas)?;
                            }
                            if !v6.is_empty() {
                                let rdatas = v6.iter().map(|a| a.octets().to_vec()).collect();
                                sign(Variant::V6(v6.into()), rtype::AAAA, rdatas)?;
                            }
                        }
                        Target::Cname { wire, .. } => {
                            sign(
                                Variant::Cname(wire.into()),
                                rtype::CNAME,
                                vec![wire.to_vec()],
                            )?;
                        }
                    }
                }
            }
            sigs.variants += variants.len();
            sigs.by_binding.push(variants);
        }
        Ok(sigs)
    }

    /// One signed answer per type (the first signed) at `binding`, as (RRset, RRSIGs): what a
    /// zone dump shows for a steered name.
    pub fn examples(&self, binding: SteeredBinding) -> Vec<(RRset, &RRset)> {
        let mut out: Vec<(RRset, &RRset)> = Vec::new();
        for (variant, sig) in self.by_binding.get(binding.index()).into_iter().flatten() {
            let (rt, rdatas): (u16, Vec<Vec<u8>>) = match variant {
                Variant::V4(a) => (rtype::A, a.iter().map(|a| a.octets().to_vec()).collect()),
                Variant::V6(a) => (rtype::AAAA, a.iter().map(|a| a.octets().to_vec()).collect()),
                Variant::Cname(w) => (rtype::CNAME, vec![w.to_vec()]),
            };
            if out.iter().any(|(s, _)| s.rtype == rt) {
                continue;
            }
            let slices: Vec<&[u8]> = rdatas.iter().map(Vec::as_slice).collect();
            out.push((rrset(rt, sig.ttl, &slices), sig));
        }
        out
    }

    /// The signature of this answer at this binding.
    pub fn find(&self, binding: SteeredBinding, data: &SteeredData<'_>) -> Option<&RRset> {
        let variants = self.by_binding.get(binding.index())?;
        variants
            .iter()
            .find(|(v, _)| match (v, data) {
                // A set with cells left out was not signed ahead: it goes unsigned.
                (Variant::V4(a), SteeredData::Addresses(Addresses::V4(b, left_out))) => {
                    !left_out.any() && a[..] == b[..]
                }
                (Variant::V6(a), SteeredData::Addresses(Addresses::V6(b, left_out))) => {
                    !left_out.any() && a[..] == b[..]
                }
                (Variant::Cname(a), SteeredData::Cname(b)) => a[..] == b[..],
                _ => false,
            })
            .map(|(_, sig)| sig)
    }
}

/// What the answers of this steered root can hold (for its NSEC type bitmap).
pub fn steered_types(policies: &CompiledPolicies, binding: SteeredBinding) -> SteeredTypes {
    let mut types = SteeredTypes::default();
    let Some(steered) = policies.steered().get(binding.index()) else {
        return types;
    };
    for target in policies.possible_targets(steered.root) {
        match target {
            Target::Addresses { v4, v6 } => {
                types.a |= !v4.is_empty();
                types.aaaa |= !v6.is_empty();
            }
            Target::Cname { .. } => types.cname = true,
        }
    }
    types
}
