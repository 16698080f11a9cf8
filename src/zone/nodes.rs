//! A zone's names: a shared base map plus a small overlay of the names a difference changed
//! (issue 32 item 4, "a change costs the change").
//!
//! A reload that changes a few records of a million-name zone must not copy a million nodes:
//! the new version shares the old one's base (an `Arc`) and carries only the changed nodes,
//! which every probe checks first. Empty, the overlay costs one branch per probe. Names are
//! only replaced or added through the overlay, never removed (a difference that would remove
//! a name is applied by a full build instead, see [`super::difference`]).
//!
//! Mutation in place ([`Nodes::get_mut`] and friends, used while a zone is built or signed)
//! first folds the overlay into the base, copying the base if another version shares it.

use std::sync::Arc;

use rustc_hash::FxHashMap;

use super::model::Node;

/// The names of a zone (lower-cased wire format) and their nodes.
#[derive(Debug, Default, Clone)]
pub struct Nodes {
    base: Arc<FxHashMap<Box<[u8]>, Node>>,
    /// Nodes that replace or add to the base's, checked first.
    overlay: FxHashMap<Box<[u8]>, Node>,
    /// How many overlay names the base does not have.
    added: usize,
}

impl From<FxHashMap<Box<[u8]>, Node>> for Nodes {
    fn from(base: FxHashMap<Box<[u8]>, Node>) -> Self {
        Nodes {
            base: Arc::new(base),
            overlay: FxHashMap::default(),
            added: 0,
        }
    }
}

impl Nodes {
    #[inline]
    pub fn get(&self, name: &[u8]) -> Option<&Node> {
        self.get_key_value(name).map(|(_, node)| node)
    }

    #[inline]
    pub fn get_key_value(&self, name: &[u8]) -> Option<(&[u8], &Node)> {
        if !self.overlay.is_empty() {
            if let Some((key, node)) = self.overlay.get_key_value(name) {
                return Some((key, node));
            }
        }
        self.base
            .get_key_value(name)
            .map(|(key, node)| (&key[..], node))
    }

    pub fn contains_key(&self, name: &[u8]) -> bool {
        self.get(name).is_some()
    }

    pub fn len(&self) -> usize {
        self.base.len() + self.added
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// How many nodes sit in the overlay (0 for a zone built whole).
    pub fn overlay_len(&self) -> usize {
        self.overlay.len()
    }

    /// Every name once, with its current node (overlay first, then the base's others).
    pub fn iter(&self) -> Iter<'_> {
        Iter {
            overlay: &self.overlay,
            in_overlay: self.overlay.iter(),
            in_base: self.base.iter(),
        }
    }

    pub fn keys(&self) -> impl Iterator<Item = &Box<[u8]>> {
        self.iter().map(|(k, _)| k)
    }

    pub fn values(&self) -> impl Iterator<Item = &Node> {
        self.iter().map(|(_, v)| v)
    }

    /// These nodes with `changed` replacing (or added beside) theirs: the base is shared, not
    /// copied.
    pub fn with_changes(&self, changed: impl IntoIterator<Item = (Box<[u8]>, Node)>) -> Nodes {
        let mut next = self.clone();
        for (name, node) in changed {
            let in_base = next.base.contains_key(&name);
            if next.overlay.insert(name, node).is_none() && !in_base {
                next.added += 1;
            }
        }
        next
    }

    /// The map itself, for changes in place: the overlay folded into the base first (the
    /// base copied when another version shares it).
    fn base_mut(&mut self) -> &mut FxHashMap<Box<[u8]>, Node> {
        let base = Arc::make_mut(&mut self.base);
        base.extend(self.overlay.drain());
        self.added = 0;
        base
    }

    pub fn get_mut(&mut self, name: &[u8]) -> Option<&mut Node> {
        self.base_mut().get_mut(name)
    }

    pub fn insert(&mut self, name: Box<[u8]>, node: Node) -> Option<Node> {
        self.base_mut().insert(name, node)
    }

    pub fn entry(
        &mut self,
        name: Box<[u8]>,
    ) -> std::collections::hash_map::Entry<'_, Box<[u8]>, Node> {
        self.base_mut().entry(name)
    }

    pub fn iter_mut(&mut self) -> impl Iterator<Item = (&Box<[u8]>, &mut Node)> {
        self.base_mut().iter_mut()
    }

    pub fn values_mut(&mut self) -> impl Iterator<Item = &mut Node> {
        self.base_mut().values_mut()
    }
}

/// Every name once: the overlay's, then the base's that the overlay does not replace.
pub struct Iter<'a> {
    overlay: &'a FxHashMap<Box<[u8]>, Node>,
    in_overlay: std::collections::hash_map::Iter<'a, Box<[u8]>, Node>,
    in_base: std::collections::hash_map::Iter<'a, Box<[u8]>, Node>,
}

impl<'a> Iterator for Iter<'a> {
    type Item = (&'a Box<[u8]>, &'a Node);

    fn next(&mut self) -> Option<Self::Item> {
        if let Some(found) = self.in_overlay.next() {
            return Some(found);
        }
        loop {
            let (name, node) = self.in_base.next()?;
            if self.overlay.is_empty() || !self.overlay.contains_key(&name[..]) {
                return Some((name, node));
            }
        }
    }
}

impl<'a> IntoIterator for &'a Nodes {
    type Item = (&'a Box<[u8]>, &'a Node);
    type IntoIter = Iter<'a>;

    fn into_iter(self) -> Iter<'a> {
        self.iter()
    }
}

impl std::ops::Index<&[u8]> for Nodes {
    type Output = Node;

    fn index(&self, name: &[u8]) -> &Node {
        match self.get(name) {
            Some(node) => node,
            None => panic!("no node {name:?}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(ttl: u32) -> Node {
        Node {
            rrsets: vec![crate::zone::model::RRset {
                rtype: 1,
                ttl,
                count: 0,
                encoded: Box::default(),
                targets: Box::default(),
                rrsig: None,
            }],
            ..Node::default()
        }
    }

    #[test]
    fn changes_shadow_the_shared_base_and_fold_back_on_mutation() {
        let mut base = FxHashMap::default();
        base.insert(Box::from(&b"\x01a\x00"[..]), node(1));
        base.insert(Box::from(&b"\x01b\x00"[..]), node(2));
        let old = Nodes::from(base);
        let changed = old.with_changes([
            (Box::from(&b"\x01a\x00"[..]), node(10)),
            (Box::from(&b"\x01c\x00"[..]), node(30)),
        ]);
        assert!(Arc::ptr_eq(&old.base, &changed.base), "the base is shared");
        assert_eq!(changed.len(), 3);
        assert_eq!(changed.iter().count(), 3);
        assert_eq!(changed.get(b"\x01a\x00").map(|n| n.rrsets[0].ttl), Some(10));
        assert_eq!(changed.get(b"\x01b\x00").map(|n| n.rrsets[0].ttl), Some(2));
        assert_eq!(old.get(b"\x01a\x00").map(|n| n.rrsets[0].ttl), Some(1));
        assert!(old.get(b"\x01c\x00").is_none());
        let mut folded = changed.clone();
        assert!(folded.get_mut(b"\x01c\x00").is_some());
        assert_eq!(folded.overlay_len(), 0);
        assert_eq!(folded.len(), 3);
        assert_eq!(old.len(), 2, "the old version is untouched");
    }
}
