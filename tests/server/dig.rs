//! The README's `dig` lines, run with the real `dig` against the bundled example (the repo's
//! `steerdns.toml` and `zones/`), asserting on what dig prints: status, header flags, sections.

use crate::common;

use std::path::PathBuf;

use common::*;

/// The bundled example as the README runs it (from the repo root, `./steerdns.toml`).
fn example() -> Server {
    Server::start(&[])
}

fn status(out: &str) -> &str {
    let at = out
        .find("status: ")
        .unwrap_or_else(|| panic!("no status in:\n{out}"));
    let rest = &out[at + "status: ".len()..];
    &rest[..rest.find(',').unwrap_or(rest.len())]
}

/// The header flags dig shows (`qr aa rd` → ["qr", "aa", "rd"]).
fn flags(out: &str) -> Vec<&str> {
    let at = out
        .find(";; flags:")
        .unwrap_or_else(|| panic!("no flags in:\n{out}"));
    let rest = &out[at + ";; flags:".len()..];
    rest[..rest.find(';').unwrap_or(rest.len())]
        .split_whitespace()
        .collect()
}

/// A header count (`ANSWER: 2` → 2).
fn count(out: &str, section: &str) -> usize {
    let key = format!("{section}: ");
    let at = out
        .find(&key)
        .unwrap_or_else(|| panic!("no {section} count in:\n{out}"));
    let rest = &out[at + key.len()..];
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().expect("a count")
}

/// The records of a section as whitespace-split fields: [owner, ttl, class, type, rdata...].
fn section(out: &str, name: &str) -> Vec<Vec<String>> {
    let header = format!(";; {name} SECTION:");
    let Some(at) = out.find(&header) else {
        return Vec::new();
    };
    out[at + header.len()..]
        .lines()
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        .map(|l| l.split_whitespace().map(str::to_string).collect())
        .collect()
}

fn types(records: &[Vec<String>]) -> Vec<&str> {
    records.iter().map(|r| r[3].as_str()).collect()
}

#[test]
fn soa_is_authoritative() {
    let server = example();
    let out = dig(&server, &["example.com", "SOA"]);
    assert_eq!(status(&out), "NOERROR", "{out}");
    assert!(flags(&out).contains(&"aa"), "{out}");
    assert!(!flags(&out).contains(&"ra"), "we do not recurse: {out}");
    let answer = section(&out, "ANSWER");
    assert_eq!(types(&answer), vec!["SOA"], "{out}");
    assert_eq!(answer[0][0], "example.com.");
    assert_eq!(
        &answer[0][4..6],
        ["ns1.example.com.", "hostmaster.example.com."]
    );
    assert_eq!(
        answer[0].last().map(String::as_str),
        Some("300"),
        "SOA MINIMUM"
    );
}

#[test]
fn www_cname_is_followed_into_the_platform_zone() {
    let server = example();
    let out = dig(&server, &["www.example.com", "A"]);
    assert_eq!(status(&out), "NOERROR", "{out}");
    assert!(flags(&out).contains(&"aa"), "{out}");
    let answer = section(&out, "ANSWER");
    assert_eq!(types(&answer), vec!["CNAME", "A"], "{out}");
    assert_eq!(answer[0][0], "www.example.com.");
    assert_eq!(answer[0][4], "contoso.edge.example.net.");
    assert_eq!(answer[1][0], "contoso.edge.example.net.");
}

#[test]
fn nxdomain_has_soa_in_authority() {
    let server = example();
    let out = dig(&server, &["nope.example.com", "A"]);
    assert_eq!(status(&out), "NXDOMAIN", "{out}");
    assert!(flags(&out).contains(&"aa"), "{out}");
    assert_eq!(count(&out, "ANSWER"), 0, "{out}");
    let authority = section(&out, "AUTHORITY");
    assert_eq!(types(&authority), vec!["SOA"], "{out}");
    assert_eq!(authority[0][0], "example.com.");
    assert_eq!(
        authority[0][1], "300",
        "negative TTL: min(SOA TTL, MINIMUM)"
    );
}

#[test]
fn referral_below_the_cut() {
    let server = example();
    for name in ["host.sub.example.com", "x.sub.example.com"] {
        let out = dig(&server, &[name, "A", "+norec"]);
        assert_eq!(status(&out), "NOERROR", "{out}");
        assert_eq!(flags(&out), vec!["qr"], "a referral has no aa: {out}");
        assert_eq!(count(&out, "ANSWER"), 0, "{out}");
        let authority = section(&out, "AUTHORITY");
        assert_eq!(types(&authority), vec!["NS", "NS"], "{out}");
        assert!(
            authority.iter().all(|r| r[0] == "sub.example.com."),
            "{out}"
        );
        let mut servers: Vec<&str> = authority.iter().map(|r| r[4].as_str()).collect();
        servers.sort_unstable();
        assert_eq!(servers, vec!["ns.example.net.", "ns1.sub.example.com."]);
        let additional = section(&out, "ADDITIONAL");
        assert_eq!(types(&additional), vec!["A", "AAAA"], "glue: {out}");
        assert!(additional.iter().all(|r| r[0] == "ns1.sub.example.com."));
        assert_eq!(additional[0][4], "192.0.2.200");
        assert_eq!(additional[1][4], "2001:db8::200");
    }
}

#[test]
fn norec_flags() {
    let server = example();
    let out = dig(&server, &["example.com", "SOA", "+norec"]);
    assert_eq!(flags(&out), vec!["qr", "aa"], "{out}");
    let out = dig(&server, &["example.com", "SOA"]);
    assert_eq!(
        flags(&out),
        vec!["qr", "aa", "rd"],
        "RD echoed, no RA: {out}"
    );
}

#[test]
fn tcp_answers_like_udp() {
    let server = example();
    let out = dig(&server, &["www.example.com", "A", "+tcp"]);
    assert!(out.contains("(TCP)"), "{out}");
    assert_eq!(status(&out), "NOERROR", "{out}");
    assert!(flags(&out).contains(&"aa"));
    let udp = dig(&server, &["www.example.com", "A"]);
    assert_eq!(section(&out, "ANSWER"), section(&udp, "ANSWER"));
}

#[test]
fn big_answer_truncates_and_dig_retries_over_tcp() {
    let server = example();
    let out = dig(&server, &["big.example.com", "TXT"]);
    assert!(out.contains(";; Truncated, retrying in TCP mode."), "{out}");
    assert!(out.contains("(TCP)"), "{out}");
    assert_eq!(status(&out), "NOERROR", "{out}");
    let answer = section(&out, "ANSWER");
    assert_eq!(types(&answer), vec!["TXT"], "{out}");
    assert_eq!(answer[0].len(), 4 + 6, "six character strings: {out}");
    for (text, letter) in answer[0][4..].iter().zip('a'..='f') {
        let inner = text.trim_matches('"');
        assert!(
            !inner.is_empty() && inner.chars().all(|c| c == letter),
            "{text}"
        );
    }

    // What the UDP answer itself looks like: TC, no records.
    for edns in ["+edns=0", "+noedns"] {
        let out = dig(&server, &["big.example.com", "TXT", "+ignore", edns]);
        assert!(flags(&out).contains(&"tc"), "{edns}: {out}");
        assert_eq!(count(&out, "ANSWER"), 0, "{edns}: {out}");
        assert_eq!(count(&out, "AUTHORITY"), 0, "{edns}: {out}");
    }
}

#[test]
fn wildcard_answers_with_the_query_name() {
    let server = example();
    let out = dig(&server, &["foo.wild.example.com", "A"]);
    assert_eq!(status(&out), "NOERROR", "{out}");
    assert!(flags(&out).contains(&"aa"));
    let answer = section(&out, "ANSWER");
    assert_eq!(answer.len(), 1, "{out}");
    assert_eq!(answer[0][0], "foo.wild.example.com.");
    assert_eq!(answer[0][3..5], ["A", "192.0.2.100"]);
}

#[test]
fn mixed_case_question_is_kept() {
    let server = example();
    let out = dig(&server, &["FoO.wIlD.ExAmPlE.cOm", "A"]);
    assert!(out.contains(";FoO.wIlD.ExAmPlE.cOm.\t"), "{out}");
    assert_eq!(
        section(&out, "ANSWER")[0][0],
        "FoO.wIlD.ExAmPlE.cOm.",
        "{out}"
    );
    let out = dig(&server, &["mAiL.eXaMpLe.CoM", "A"]);
    assert!(out.contains(";mAiL.eXaMpLe.CoM.\t"), "{out}");
}

#[test]
fn version_bind_in_chaos() {
    let server = example();
    let out = dig(&server, &["version.bind", "CH", "TXT"]);
    assert_eq!(status(&out), "NOERROR", "{out}");
    let answer = section(&out, "ANSWER");
    assert_eq!(answer.len(), 1, "{out}");
    assert_eq!(answer[0][2..4], ["CH", "TXT"]);
    assert!(answer[0][4].starts_with("\"steerdns"), "{out}");
}

#[test]
fn nsid_names_the_node() {
    let dir = std::env::temp_dir().join(format!("steerdns-dig-nsid-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let config = dir.join("steerdns.toml");
    let zones: PathBuf = repo_path("zones");
    let text = format!(
        "[server]\nzones = {:?}\nnsid = \"dig-node-1\"\n",
        zones.to_str().expect("utf-8 path")
    );
    std::fs::write(&config, text).expect("write config");
    let server = Server::start(&["--config", config.to_str().expect("utf-8 path")]);
    let out = dig(&server, &["example.com", "SOA", "+nsid"]);
    let _ = std::fs::remove_dir_all(&dir);
    assert!(out.contains("(\"dig-node-1\")"), "{out}");
    let out = dig(&server, &["example.com", "SOA"]);
    assert!(!out.contains("NSID"), "NSID only when asked: {out}");
}

/// One config file for a whole fleet (a Kubernetes ConfigMap): `--nsid` and `--identity` name
/// the node, over what the file says, and still do after a reload re-reads the file.
#[test]
fn nsid_and_identity_flags_name_the_node_across_reloads() {
    let dir = TempDir::new("dig-node-flags");
    let config = dir.path().join("steerdns.toml");
    let zones: PathBuf = repo_path("zones");
    let write_config = |version: &str| {
        let text = format!(
            "[server]\nzones = {:?}\nnsid = \"from-config\"\nidentity = \"config-id\"\n\
             version = \"{version}\"\n",
            zones.to_str().expect("utf-8 path")
        );
        std::fs::write(&config, text).expect("write config");
    };
    write_config("v1");
    let server = Server::start(&[
        "--config",
        config.to_str().expect("utf-8 path"),
        "--nsid",
        "node-7",
        "--identity",
        "node-7.fra1",
    ]);
    let chaos = |name: &str| dig(&server, &["+short", "CH", "TXT", name]);
    let check = |when: &str| {
        let out = dig(&server, &["example.com", "SOA", "+nsid"]);
        assert!(out.contains("(\"node-7\")"), "{when}: {out}");
        assert_eq!(chaos("id.server").trim(), "\"node-7.fra1\"", "{when}");
    };
    check("at start");
    assert_eq!(chaos("version.bind").trim(), "\"v1\"");

    // A reload (SIGHUP) re-reads the file: its new version string shows it happened.
    write_config("v2");
    let pid = libc::pid_t::try_from(server.pid()).expect("pid fits pid_t");
    // SAFETY: kill(2) only sends a signal, to the server this test started.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGHUP) }, 0);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while chaos("version.bind").trim() != "\"v2\"" {
        assert!(
            std::time::Instant::now() < deadline,
            "SIGHUP did not reload the config"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    check("after a reload");
}

#[test]
fn refused_outside_our_zones() {
    let server = example();
    let out = dig(&server, &["www.example.org", "A"]);
    assert_eq!(status(&out), "REFUSED", "{out}");
    assert!(!flags(&out).contains(&"aa"), "{out}");
}
