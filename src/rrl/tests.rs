//! The limiter's decisions with a fake clock: keys, classes, slip, exemptions, config checks.

use super::*;

fn limits(extra: &str) -> RrlLimits {
    let text = format!("enabled = true\nresponses_per_second = 10\nburst = 4\n{extra}");
    let config: RrlConfig = match toml::from_str(&text) {
        Ok(c) => c,
        Err(e) => panic!("test config: {e}"),
    };
    assert_eq!(config.problem(), None);
    match RrlLimits::from_config(&config) {
        Some(l) => l,
        None => panic!("enabled"),
    }
}

fn limiter(extra: &str) -> RateLimiter {
    RateLimiter::new(&limits(extra), None)
}

fn ip(text: &str) -> IpAddr {
    text.parse()
        .unwrap_or_else(|e| panic!("test address {text}: {e}"))
}

const WWW: Subject<'static> = Subject {
    qname: b"\x03www\x07example\x03com\x00",
    qtype: 1,
    zone: Some(0),
};

/// Verdicts for `n` responses of one kind at one instant.
fn verdicts(
    l: &RateLimiter,
    addr: &str,
    class: Class,
    subject: Option<&Subject<'_>>,
    now: u32,
    n: usize,
    limited: &Cell<u32>,
) -> Vec<Verdict> {
    (0..n)
        .map(|_| l.check_at(ip(addr), class, subject, now, limited))
        .collect()
}

fn count(v: &[Verdict], which: Verdict) -> usize {
    v.iter().filter(|x| **x == which).count()
}

#[test]
fn a_prefix_shares_one_bucket_and_another_prefix_has_its_own() {
    let l = limiter("slip = 0");
    let c = Cell::new(0);
    let mut sent = 0;
    // 50 addresses of one /24, 4 queries each, at one instant: one burst between them.
    for host in 1..=50 {
        let v = verdicts(
            &l,
            &format!("127.1.1.{host}"),
            Class::Answer,
            Some(&WWW),
            5,
            4,
            &c,
        );
        sent += count(&v, Verdict::Send);
        assert_eq!(count(&v, Verdict::Slip), 0, "slip 0 never truncates");
    }
    assert_eq!(sent, 4);
    // The next /24 is untouched.
    let v = verdicts(&l, "127.1.2.1", Class::Answer, Some(&WWW), 5, 6, &c);
    assert_eq!(count(&v, Verdict::Send), 4);
    // IPv6: one /56 shares, the next /56 does not.
    let v = verdicts(&l, "2001:db8:0:ff::1", Class::Answer, Some(&WWW), 5, 3, &c);
    let w = verdicts(&l, "2001:db8:0:1::2", Class::Answer, Some(&WWW), 5, 3, &c);
    assert_eq!(count(&v, Verdict::Send) + count(&w, Verdict::Send), 4);
    let x = verdicts(&l, "2001:db8:0:100::1", Class::Answer, Some(&WWW), 5, 3, &c);
    assert_eq!(count(&x, Verdict::Send), 3);
}

#[test]
fn the_rate_refills_with_the_fake_clock() {
    let l = limiter("slip = 0");
    let c = Cell::new(0);
    let send = |now| l.check_at(ip("192.0.2.7"), Class::Answer, Some(&WWW), now, &c);
    assert_eq!((0..4).filter(|_| send(1000) == Verdict::Send).count(), 4);
    assert_eq!(send(1000), Verdict::Drop);
    assert_eq!(send(1099), Verdict::Drop);
    assert_eq!(send(1100), Verdict::Send);
    assert_eq!(send(1100), Verdict::Drop);
}

#[test]
fn every_nth_limited_response_slips() {
    for slip in [1u32, 2, 3, 5] {
        let l = limiter(&format!("slip = {slip}"));
        let c = Cell::new(0);
        let v = verdicts(&l, "198.51.100.9", Class::Answer, Some(&WWW), 9, 4 + 30, &c);
        assert!(
            v[..4].iter().all(|x| *x == Verdict::Send),
            "the burst first"
        );
        let limited = &v[4..];
        for (i, verdict) in limited.iter().enumerate() {
            let expected = if (i + 1) % slip as usize == 0 {
                Verdict::Slip
            } else {
                Verdict::Drop
            };
            assert_eq!(
                *verdict,
                expected,
                "slip {slip}, limited response {}",
                i + 1
            );
        }
    }
}

#[test]
fn classes_and_subjects_make_separate_keys() {
    let l = limiter("slip = 0");
    let c = Cell::new(0);
    let client = "203.0.113.5";
    let spend = |class, subject: Option<&Subject<'_>>| {
        count(
            &verdicts(&l, client, class, subject, 7, 10, &c),
            Verdict::Send,
        )
    };
    assert_eq!(spend(Class::Answer, Some(&WWW)), 4);
    // Another type of the same name is another answer key...
    let aaaa = Subject { qtype: 28, ..WWW };
    assert_eq!(spend(Class::Answer, Some(&aaaa)), 4);
    // ...but NODATA is keyed by the name alone.
    assert_eq!(spend(Class::Nodata, Some(&WWW)), 4);
    assert_eq!(spend(Class::Nodata, Some(&aaaa)), 0);
    // NXDOMAIN is keyed by the zone: random names in one zone share a bucket.
    let random = Subject {
        qname: b"\x05xq7zk\x07example\x03com\x00",
        ..WWW
    };
    assert_eq!(spend(Class::Nxdomain, Some(&WWW)), 4);
    assert_eq!(spend(Class::Nxdomain, Some(&random)), 0);
    let other_zone = Subject {
        zone: Some(1),
        ..random
    };
    assert_eq!(spend(Class::Nxdomain, Some(&other_zone)), 4);
    // Errors are keyed by the client prefix alone.
    assert_eq!(spend(Class::Error, None), 4);
    assert_eq!(spend(Class::Error, Some(&WWW)), 0);
}

#[test]
fn exempt_networks_are_never_limited() {
    let l = limiter("slip = 0\nexempt = [\"10.9.0.0/16\", \"2001:db8:e::/48\"]");
    let c = Cell::new(0);
    for addr in ["10.9.200.1", "2001:db8:e:1::5"] {
        let v = verdicts(&l, addr, Class::Answer, Some(&WWW), 1, 100, &c);
        assert_eq!(count(&v, Verdict::Send), 100, "{addr}");
    }
    let v = verdicts(&l, "10.10.0.1", Class::Answer, Some(&WWW), 1, 100, &c);
    assert_eq!(count(&v, Verdict::Send), 4);
}

#[test]
fn tcp_is_never_limited() {
    let config = RrlConfig {
        enabled: true,
        responses_per_second: 1,
        burst: Some(1),
        slip: 0,
        ..RrlConfig::default()
    };
    let Some(l) = RateLimiter::from_config(&config) else {
        panic!("enabled");
    };
    let client = Requester::new(ip("192.0.2.1"), Transport::Tcp);
    for _ in 0..50 {
        assert_eq!(l.check(&client, Class::Error, None), None);
    }
    let udp = Requester::new(ip("192.0.2.1"), Transport::Udp);
    let v: Vec<Verdict> = (0..50)
        .filter_map(|_| l.check(&udp, Class::Error, None))
        .collect();
    assert!(count(&v, Verdict::Send) <= 2, "{v:?}");
}

#[test]
fn a_reload_keeps_the_buckets() {
    let l = limiter("slip = 0");
    let c = Cell::new(0);
    assert_eq!(
        count(
            &verdicts(&l, "192.0.2.1", Class::Error, None, 3, 10, &c),
            Verdict::Send
        ),
        4
    );
    let next = RateLimiter::new(&limits("slip = 0"), Some(&l));
    assert_eq!(
        count(
            &verdicts(&next, "192.0.2.1", Class::Error, None, 3, 10, &c),
            Verdict::Send
        ),
        0
    );
    // A different table size cannot reuse them: fresh buckets.
    let l = RateLimiter::new(&limits("slip = 0\ntable_size = 64"), Some(&next));
    assert_eq!(
        count(
            &verdicts(&l, "192.0.2.1", Class::Error, None, 3, 10, &c),
            Verdict::Send
        ),
        4
    );
}

#[test]
fn responses_are_classified_from_what_their_writer_says() {
    let sent = |rcode: u16, answers: bool, truncated: bool, referral: bool| Sent {
        len: 12,
        rcode,
        truncated,
        answers,
        referral,
    };
    assert_eq!(Class::of(&sent(0, true, false, false)), Class::Answer);
    assert_eq!(Class::of(&sent(0, false, true, false)), Class::Answer);
    assert_eq!(Class::of(&sent(0, false, false, false)), Class::Nodata);
    assert_eq!(Class::of(&sent(0, false, false, true)), Class::Referral);
    assert_eq!(Class::of(&sent(3, false, false, false)), Class::Nxdomain);
    assert_eq!(Class::of(&sent(5, false, false, false)), Class::Error);
    assert_eq!(Class::of(&sent(16, false, false, false)), Class::Error);
}

#[test]
fn a_precompiled_header_reads_as_its_writer_said() {
    let header = |flags: u16, an: u16, ns: u16| {
        let mut h = [0u8; 12];
        h[2..4].copy_from_slice(&flags.to_be_bytes());
        h[6..8].copy_from_slice(&an.to_be_bytes());
        h[8..10].copy_from_slice(&ns.to_be_bytes());
        h
    };
    let aa = 0x8400;
    let class = |h: &[u8]| Class::of(&Sent::of_precompiled(h, h.len()));
    assert_eq!(class(&header(aa, 1, 0)), Class::Answer);
    assert_eq!(class(&header(aa | 0x0200, 0, 0)), Class::Answer);
    assert_eq!(class(&header(aa, 0, 1)), Class::Nodata);
    assert_eq!(class(&header(0x8000, 0, 2)), Class::Referral);
    assert_eq!(class(&header(aa | 3, 0, 1)), Class::Nxdomain);
    assert_eq!(class(&header(0x8005, 0, 0)), Class::Error);
    assert_eq!(class(&[]), Class::Nodata);
}

#[test]
fn config_problems_name_the_field() {
    let problem = |text: &str| {
        let config: RrlConfig = toml::from_str(text).unwrap_or_else(|e| panic!("{text}: {e}"));
        config.problem().map(|(field, _)| field)
    };
    assert_eq!(problem(""), None);
    assert_eq!(
        problem("responses_per_second = 0"),
        Some("rrl.responses_per_second")
    );
    assert_eq!(problem("burst = 0"), Some("rrl.burst"));
    assert_eq!(problem("ipv4_prefix = 33"), Some("rrl.ipv4_prefix"));
    assert_eq!(problem("ipv6_prefix = 0"), Some("rrl.ipv6_prefix"));
    assert_eq!(problem("table_size = 0"), Some("rrl.table_size"));
    assert!(toml::from_str::<RrlConfig>("rate = 5").is_err());
    // Disabled by default.
    assert!(RateLimiter::from_config(&RrlConfig::default()).is_none());
}
