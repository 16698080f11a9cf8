//! DNSSEC canonical name order (RFC 4034 §6.1): names compared label by label from the
//! rightmost, each label as lower-cased bytes, a missing label sorting first. The zone's
//! denial chain is sorted by it and the serving path binary-searches it, so it works on
//! uncompressed wire names in place (no allocation).

use std::cmp::Ordering;

/// Offsets of the labels of an uncompressed wire name (root excluded); returns how many.
/// Stops at a malformed length byte.
fn label_offsets(name: &[u8], out: &mut [u8; 128]) -> usize {
    let mut pos = 0usize;
    let mut count = 0usize;
    while let Some(&len) = name.get(pos) {
        if len == 0 || len > 63 || count == out.len() || pos > usize::from(u8::MAX) {
            break;
        }
        out[count] = pos as u8;
        count += 1;
        pos += 1 + usize::from(len);
    }
    count
}

fn label_at(name: &[u8], offset: u8) -> &[u8] {
    let at = usize::from(offset);
    let len = name.get(at).map_or(0, |&l| usize::from(l));
    name.get(at + 1..at + 1 + len).unwrap_or_default()
}

/// Canonical order of two uncompressed wire names (either letter case).
pub fn canonical_cmp(a: &[u8], b: &[u8]) -> Ordering {
    let (mut la, mut lb) = ([0u8; 128], [0u8; 128]);
    let (na, nb) = (label_offsets(a, &mut la), label_offsets(b, &mut lb));
    for i in 1..=na.min(nb) {
        let (x, y) = (label_at(a, la[na - i]), label_at(b, lb[nb - i]));
        let ord = x
            .iter()
            .map(u8::to_ascii_lowercase)
            .cmp(y.iter().map(u8::to_ascii_lowercase));
        if ord != Ordering::Equal {
            return ord;
        }
    }
    na.cmp(&nb)
}

/// Number of labels of a wire name, root excluded.
pub fn label_count(name: &[u8]) -> usize {
    label_offsets(name, &mut [0u8; 128])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wire(text: &str) -> Vec<u8> {
        let mut out = Vec::new();
        for label in text.split('.').filter(|l| !l.is_empty()) {
            out.push(label.len() as u8);
            out.extend_from_slice(label.as_bytes());
        }
        out.push(0);
        out
    }

    #[test]
    fn rfc4034_example_order() {
        // RFC 4034 §6.1's example, in canonical order (the \001 and \200 labels as bytes).
        let names: Vec<Vec<u8>> = vec![
            wire("example"),
            wire("a.example"),
            wire("yljkjljk.a.example"),
            wire("Z.a.example"),
            [&[4u8, b'z', b'w', b'i', b'x'][..], &wire("a.example")].concat(),
            wire("z.example"),
            [&[1u8, 1][..], &wire("z.example")].concat(),
            wire("*.z.example"),
            [&[1u8, 0x80][..], &wire("z.example")].concat(),
        ];
        for pair in names.windows(2) {
            assert_eq!(
                canonical_cmp(&pair[0], &pair[1]),
                Ordering::Less,
                "{pair:?}"
            );
            assert_eq!(canonical_cmp(&pair[1], &pair[0]), Ordering::Greater);
        }
        assert_eq!(
            canonical_cmp(&wire("A.Example"), &wire("a.example")),
            Ordering::Equal
        );
        assert_eq!(label_count(&wire("a.b.c")), 3);
        assert_eq!(label_count(&[0]), 0);
    }
}
