//! The zone parser's tests: whole files in, records or problems (with their lines) out.

use super::rdata::push_name;
use super::*;

const HEAD: &str = "$TTL 3600\n@ IN SOA ns1 hostmaster 1 7200 900 1209600 300\n@ IN NS ns1\n";

fn origin() -> Name {
    Name::from_ascii("example.com.").expect("test origin")
}

fn path() -> PathBuf {
    PathBuf::from("zones/example.com.zone")
}

fn records(text: &str) -> Vec<SourceRecord> {
    match parse_zone_text(text, &path(), &origin()) {
        Ok(zone) => zone.records,
        Err(problems) => panic!("unexpected problems: {problems:#?}"),
    }
}

fn problems(text: &str) -> Vec<ZoneProblem> {
    match parse_zone_text(text, &path(), &origin()) {
        Ok(zone) => panic!("expected problems, got {:#?}", zone.records),
        Err(problems) => problems,
    }
}

/// The single problem of `text`, as "line: message".
fn only_problem(text: &str) -> (u32, String) {
    let found = problems(text);
    assert_eq!(found.len(), 1, "{found:#?}");
    (found[0].line, found[0].message.clone())
}

fn name(text: &str) -> Name {
    Name::from_ascii(text).expect("test name")
}

fn wire(name_text: &str) -> Vec<u8> {
    let mut out = Vec::new();
    push_name(&mut out, &name(name_text));
    out
}

fn find<'r>(records: &'r [SourceRecord], owner: &str, rtype: RecordType) -> &'r SourceRecord {
    records
        .iter()
        .find(|r| r.name.eq_case(&name(owner)) && r.rtype == rtype)
        .unwrap_or_else(|| panic!("no {owner} {rtype} in {records:#?}"))
}

/// A scratch directory under the system temp dir, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> Self {
        let dir =
            std::env::temp_dir().join(format!("steerdns-zoneparse-{}-{tag}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("create temp dir");
        Self(dir)
    }

    fn write(&self, file: &str, text: &str) -> PathBuf {
        let path = self.0.join(file);
        std::fs::write(&path, text).expect("write temp file");
        path
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn at_sign_relative_and_absolute_names() {
    let recs = records(&format!(
        "{HEAD}www IN CNAME edge.example.net.\nftp IN CNAME www\n"
    ));
    let soa = find(&recs, "example.com.", RecordType::SOA);
    assert!(soa.rdata.starts_with(&wire("ns1.example.com.")));
    assert_eq!(
        find(&recs, "www.example.com.", RecordType::CNAME).rdata,
        wire("edge.example.net.")
    );
    assert_eq!(
        find(&recs, "ftp.example.com.", RecordType::CNAME).rdata,
        wire("www.example.com.")
    );
}

#[test]
fn soa_fields_are_encoded_in_order() {
    let recs = records("@ 60 IN SOA ns1 host.master 2026113001 2h 15m 2w 300\n");
    let mut expected = wire("ns1.example.com.");
    expected.extend(wire("host.master.example.com."));
    for value in [2_026_113_001u32, 7200, 900, 1_209_600, 300] {
        expected.extend(value.to_be_bytes());
    }
    assert_eq!(recs[0].rdata, expected);
}

#[test]
fn origin_directive_changes_relative_names() {
    let text =
        format!("{HEAD}$ORIGIN sub\nwww IN A 192.0.2.1\n$ORIGIN other.test.\n@ IN A 192.0.2.2\n");
    let recs = records(&text);
    assert_eq!(
        find(&recs, "www.sub.example.com.", RecordType::A).rdata,
        vec![192, 0, 2, 1]
    );
    assert_eq!(
        find(&recs, "other.test.", RecordType::A).rdata,
        vec![192, 0, 2, 2]
    );
}

#[test]
fn ttl_directive_with_units() {
    for (ttl, seconds) in [
        ("1h", 3600),
        ("1h30m", 5400),
        ("2D", 172_800),
        ("1w", 604_800),
        ("90", 90),
        ("1m30", 90),
    ] {
        let recs = records(&format!("$TTL {ttl}\n@ IN A 192.0.2.1\n"));
        assert_eq!(recs[0].ttl, seconds, "$TTL {ttl}");
    }
}

#[test]
fn omitted_owner_is_the_previous_owner() {
    let recs = records(&format!(
        "{HEAD}www IN A 192.0.2.1\n    IN AAAA 2001:db8::1\n\tIN TXT hi\n"
    ));
    assert_eq!(recs.len(), 5);
    for record in &recs[2..] {
        assert!(record.name.eq_case(&name("www.example.com.")), "{record:?}");
    }
}

#[test]
fn omitted_ttl_uses_dollar_ttl_then_last_explicit_ttl() {
    let recs = records("@ 300 IN A 192.0.2.1\nwww IN A 192.0.2.2\n$TTL 60\nftp IN A 192.0.2.3\n");
    let ttls: Vec<u32> = recs.iter().map(|r| r.ttl).collect();
    assert_eq!(ttls, vec![300, 300, 60]);
    let (line, message) = only_problem("\n@ IN A 192.0.2.1\n");
    assert_eq!(line, 2);
    assert!(message.contains("no TTL"), "{message}");
}

#[test]
fn ttl_and_class_in_either_order_and_class1() {
    let recs = records(
        "a 60 IN A 192.0.2.1\nb IN 61 A 192.0.2.2\nc CLASS1 62 A 192.0.2.3\nd in 63 a 192.0.2.4\n",
    );
    let ttls: Vec<u32> = recs.iter().map(|r| r.ttl).collect();
    assert_eq!(ttls, vec![60, 61, 62, 63]);
    assert!(recs.iter().all(|r| r.rtype == RecordType::A));
}

#[test]
fn classes_other_than_in_are_refused() {
    for class in ["CH", "HS", "CLASS3", "ANY"] {
        let (line, message) = only_problem(&format!("$TTL 60\n\nv {class} TXT x\n"));
        assert_eq!(line, 3);
        assert!(
            message.contains(&format!("class {class} is not supported")),
            "{message}"
        );
    }
}

#[test]
fn parentheses_span_lines_and_line_numbers_stay_right() {
    let text = "$TTL 60\n@ IN SOA ns1 hostmaster ( ; comment\n  1 ; serial\n  2 3 4\n  5 )\nwww IN A 192.0.2.1\n";
    let recs = records(text);
    assert_eq!(recs[0].line, 2);
    assert_eq!(
        recs[0].rdata.len(),
        wire("ns1.example.com.").len() + wire("hostmaster.example.com.").len() + 20
    );
    assert_eq!(recs[1].line, 6);
}

#[test]
fn quoted_strings_with_escapes() {
    let recs = records("$TTL 60\n@ IN TXT \"a \\\"b\\\" ; not a comment\" \\065x \"\\255\" \"\"\n");
    let mut expected = vec![21];
    expected.extend(b"a \"b\" ; not a comment");
    expected.extend([2, b'A', b'x', 1, 255, 0]);
    assert_eq!(recs[0].rdata, expected);
}

#[test]
fn escaped_dots_and_digits_in_names() {
    let recs = records("$TTL 60\na\\.b IN A 192.0.2.1\n\\065bc.example.com. IN A 192.0.2.2\n");
    let first: Vec<&[u8]> = recs[0].name.iter().collect();
    assert_eq!(first, vec![&b"a.b"[..], b"example", b"com"]);
    assert_eq!(recs[1].name.iter().next(), Some(&b"Abc"[..]));
}

#[test]
fn letter_case_is_kept_in_owner_and_rdata() {
    let recs = records("$TTL 60\nWWW.Example.COM. IN CNAME Edge.Example.NET.\n");
    assert_eq!(recs[0].name.to_ascii(), "WWW.Example.COM.");
    assert_eq!(recs[0].rdata, wire("Edge.Example.NET."));
    assert_eq!(recs[0].rdata[1], b'E');
}

#[test]
fn comments_blank_lines_and_crlf() {
    let text = "; header\r\n$TTL 60\r\n\r\n   \r\n; comment\r\nwww IN A 192.0.2.1 ; trailing\r\nftp IN TXT \"x\"\r\n";
    let recs = records(&format!("\u{feff}{text}"));
    assert_eq!(recs.iter().map(|r| r.line).collect::<Vec<_>>(), vec![6, 7]);
    assert_eq!(recs[1].rdata, vec![1, b'x']);
}

#[test]
fn name_bearing_types_are_encoded() {
    let text = "$TTL 60\n@ IN MX 10 mail\n_sip._tcp IN SRV 1 2 5060 sip\nptr IN PTR host.example.net.\nn IN NAPTR 100 10 \"S\" \"SIP+D2U\" \"\" _sip._udp\n";
    let recs = records(text);
    let mut mx = 10u16.to_be_bytes().to_vec();
    mx.extend(wire("mail.example.com."));
    assert_eq!(find(&recs, "example.com.", RecordType::MX).rdata, mx);
    let mut srv = [1u16, 2, 5060]
        .iter()
        .flat_map(|v| v.to_be_bytes())
        .collect::<Vec<u8>>();
    srv.extend(wire("sip.example.com."));
    assert_eq!(
        find(&recs, "_sip._tcp.example.com.", RecordType::SRV).rdata,
        srv
    );
    assert_eq!(
        find(&recs, "ptr.example.com.", RecordType::PTR).rdata,
        wire("host.example.net.")
    );
    let mut naptr = vec![0, 100, 0, 10, 1, b'S', 7];
    naptr.extend(b"SIP+D2U");
    naptr.push(0);
    naptr.extend(wire("_sip._udp.example.com."));
    assert_eq!(
        find(&recs, "n.example.com.", RecordType::NAPTR).rdata,
        naptr
    );
}

#[test]
fn ds_caa_and_hickory_types() {
    let text = "$TTL 60\n\
        sub IN DS 60485 5 1 ( 2BB183AF5F22588179A5\n 3B0A98631FAD1A292118 )\n\
        @ IN CAA 0 issue \"ca.example.net\"\n\
        @ IN AAAA 2001:db8::1\n\
        @ IN SSHFP 1 1 123456789abcdef67890123456789abcdef67890\n\
        _443._tcp IN TLSA 3 1 1 0123456789ABCDEF0123456789ABCDEF0123456789ABCDEF0123456789ABCDEF\n\
        @ IN HINFO \"PC\" \"Linux\"\n";
    let recs = records(text);
    let ds = find(&recs, "sub.example.com.", RecordType::DS);
    assert_eq!(&ds.rdata[..4], &[0xec, 0x45, 5, 1]);
    assert_eq!(ds.rdata.len(), 4 + 20);
    assert_eq!(ds.line, 2);
    let mut caa = vec![0, 5];
    caa.extend(b"issueca.example.net");
    assert_eq!(find(&recs, "example.com.", RecordType::CAA).rdata, caa);
    assert_eq!(
        find(&recs, "example.com.", RecordType::AAAA).rdata.len(),
        16
    );
    assert_eq!(
        find(&recs, "example.com.", RecordType::SSHFP).rdata[..2],
        [1, 1]
    );
    assert_eq!(
        find(&recs, "_443._tcp.example.com.", RecordType::TLSA)
            .rdata
            .len(),
        3 + 32
    );
    assert_eq!(
        find(&recs, "example.com.", RecordType::HINFO).rdata,
        b"\x02PC\x05Linux".to_vec()
    );
}

#[test]
fn https_target_is_completed_with_the_origin() {
    let recs = records(
        "$TTL 60\n@ IN HTTPS 1 edge alpn=\"h2,h3\" port=443\nw IN SVCB 0 svc.example.net.\n",
    );
    let https = find(&recs, "example.com.", RecordType::HTTPS);
    let target = wire("edge.example.com.");
    assert_eq!(&https.rdata[..2], &[0, 1]);
    assert_eq!(&https.rdata[2..2 + target.len()], target.as_slice());
    let alpn = [0, 1, 0, 6, 2, b'h', b'2', 2, b'h', b'3'];
    assert!(
        https.rdata.windows(alpn.len()).any(|w| w == alpn),
        "{:?}",
        https.rdata
    );
    let svcb = find(&recs, "w.example.com.", RecordType::SVCB);
    assert_eq!(&svcb.rdata[2..], wire("svc.example.net.").as_slice());
}

#[test]
fn rfc3597_generic_syntax() {
    let recs = records("$TTL 60\n@ CLASS1 TYPE65280 \\# 4 0a000001\n@ IN A \\# 4 C0000201\n@ IN TYPE1 192.0.2.9\ne IN TYPE65281 \\# 0\n");
    assert_eq!(recs[0].rtype, RecordType::Unknown(65280));
    assert_eq!(recs[0].rdata, vec![10, 0, 0, 1]);
    assert_eq!(recs[1].rdata, vec![192, 0, 2, 1]);
    assert_eq!(recs[2].rtype, RecordType::A);
    assert_eq!(recs[2].rdata, vec![192, 0, 2, 9]);
    assert!(recs[3].rdata.is_empty());
    let (_, message) = only_problem("$TTL 60\n@ IN TYPE65280 \\# 5 0a000001\n");
    assert!(message.contains("says 5 octets but has 4"), "{message}");
    let (_, message) = only_problem("$TTL 60\n@ IN A \\# 3 0a0000\n");
    assert!(message.contains("not valid A data"), "{message}");
    let (_, message) = only_problem("$TTL 60\n@ IN CNAME \\# 2 0341\n");
    assert!(message.contains("not valid CNAME data"), "{message}");
    let cname = records("$TTL 60\n@ IN CNAME \\# 3 014100\n");
    assert_eq!(cname[0].rdata, vec![1, b'A', 0]);
}

#[test]
fn include_is_relative_to_the_including_file_and_restores_origin() {
    let dir = TempDir::new("include");
    std::fs::create_dir_all(dir.0.join("parts")).expect("mkdir");
    dir.write(
        "parts/hosts.inc",
        "; hosts\nwww IN A 192.0.2.1\n$ORIGIN deep\nx IN A 192.0.2.2\n",
    );
    let main = dir.write("example.com.zone", "$TTL 60\n$INCLUDE parts/hosts.inc sub\nafter IN A 192.0.2.3\n$INCLUDE \"parts/hosts.inc\"\n");
    let zone = match load_zone_file(&main, &origin()) {
        Ok(zone) => zone,
        Err(problems) => panic!("{problems:#?}"),
    };
    let included = dir.0.join("parts/hosts.inc");
    let www = find(&zone.records, "www.sub.example.com.", RecordType::A);
    assert_eq!((www.file.as_path(), www.line), (included.as_path(), 2));
    assert_eq!(
        find(&zone.records, "x.deep.sub.example.com.", RecordType::A).line,
        4
    );
    let after = find(&zone.records, "after.example.com.", RecordType::A);
    assert_eq!((after.file.as_path(), after.line), (main.as_path(), 3));
    find(&zone.records, "www.example.com.", RecordType::A);
}

#[test]
fn include_cycles_depth_and_missing_files_are_problems() {
    let dir = TempDir::new("cycle");
    dir.write("b.inc", "\n$INCLUDE a.zone\n");
    let a = dir.write("a.zone", "$TTL 60\n$INCLUDE b.inc\n$INCLUDE missing.inc\n");
    let Err(found) = load_zone_file(&a, &origin()) else {
        panic!("cycle accepted")
    };
    assert_eq!(found.len(), 2, "{found:#?}");
    assert_eq!(
        (found[0].file.clone(), found[0].line),
        (dir.0.join("b.inc"), 2)
    );
    assert!(found[0].message.contains("cycle"), "{}", found[0].message);
    assert_eq!((found[1].file.clone(), found[1].line), (a.clone(), 3));
    assert!(
        found[1].message.contains("missing.inc"),
        "{}",
        found[1].message
    );

    for i in 0..=MAX_INCLUDE_DEPTH + 1 {
        dir.write(&format!("d{i}.inc"), &format!("$INCLUDE d{}.inc\n", i + 1));
    }
    let deep = dir.write("deep.zone", "$INCLUDE d0.inc\n");
    let Err(found) = load_zone_file(&deep, &origin()) else {
        panic!("depth accepted")
    };
    assert!(
        found.iter().any(|p| p.message.contains("nested deeper")),
        "{found:#?}"
    );
}

/// Depth alone bounds nothing: six includes per level, five levels deep, is 7776 reads.
/// The zone's budget of included files and of bytes stops it, said once at the include
/// that crossed it.
#[test]
fn include_fan_out_is_bounded_by_files_and_bytes() {
    let dir = TempDir::new("fanout");
    for level in 1..=5 {
        let next = if level == 5 {
            "x IN TXT \"leaf\"\n".to_string()
        } else {
            format!("$INCLUDE l{}.inc\n", level + 1).repeat(6)
        };
        dir.write(&format!("l{level}.inc"), &next);
    }
    let zone = dir.write(
        "fan.zone",
        &format!("$TTL 60\n{}", "$INCLUDE l1.inc\n".repeat(6)),
    );
    let Err(found) = load_zone_file(&zone, &origin()) else {
        panic!("fan-out accepted")
    };
    assert_eq!(found.len(), 1, "{found:#?}");
    assert!(
        found[0]
            .message
            .contains("already read 1024 included files"),
        "{}",
        found[0].message
    );
    assert!(found[0].line > 0, "{found:#?}");

    // Bytes: a small budget is crossed by the third include of a 40-byte file.
    dir.write("forty.inc", &format!("a IN TXT \"{}\"\n", "x".repeat(28)));
    let text = "$TTL 60\n$INCLUDE forty.inc\n$INCLUDE forty.inc\n$INCLUDE forty.inc\n";
    let zone = dir.write("bytes.zone", text);
    let budget = Budget {
        files: 10,
        bytes: text.len() as u64 + 100,
        spent: false,
    };
    let Err(found) = parse_zone_bytes_within(text.as_bytes(), &zone, &origin(), budget) else {
        panic!("byte budget ignored")
    };
    assert_eq!(found.len(), 1, "{found:#?}");
    assert_eq!(
        (found[0].file.as_path(), found[0].line),
        (zone.as_path(), 4)
    );
    assert!(
        found[0].message.contains("would exceed"),
        "{}",
        found[0].message
    );
    let ok = Budget {
        bytes: text.len() as u64 + 120,
        ..budget
    };
    assert!(parse_zone_bytes_within(text.as_bytes(), &zone, &origin(), ok).is_ok());
}

#[test]
fn size_limits() {
    let long_label = "a".repeat(64);
    let (_, message) = only_problem(&format!("$TTL 60\n{long_label} IN A 192.0.2.1\n"));
    assert!(message.contains("longer than 63"), "{message}");
    let ok_label = "a".repeat(63);
    records(&format!("$TTL 60\n{ok_label} IN A 192.0.2.1\n"));

    let long_name = vec!["abcdefghi"; 26].join(".");
    let (_, message) = only_problem(&format!("$TTL 60\n{long_name}. IN A 192.0.2.1\n"));
    assert!(
        message.contains("octets long; the limit is 255"),
        "{message}"
    );

    assert_eq!(
        records("$TTL 2147483647\n@ IN A 192.0.2.1\n")[0].ttl,
        MAX_TTL
    );
    let found = problems("$TTL 2147483648\n@ IN A 192.0.2.1\n");
    assert_eq!(found[0].line, 1);
    assert!(found[0].message.contains("above the limit"), "{found:#?}");

    let string = format!("\"{}\" ", "x".repeat(255));
    records(&format!("$TTL 60\n@ IN TXT {}\n", string.repeat(255)));
    let (_, message) = only_problem(&format!("$TTL 60\n@ IN TXT {}\n", string.repeat(257)));
    assert!(message.contains("the limit is 65535"), "{message}");
    let (_, message) = only_problem(&format!("$TTL 60\n@ IN TXT \"{}\"\n", "x".repeat(256)));
    assert!(
        message.contains("character string is 256 octets"),
        "{message}"
    );
}

#[test]
fn problems_are_collected_with_lines() {
    let text = "$TTL 60\n@ IN A 1.2.3\nok IN A 192.0.2.1\n@ IN FOO x\n$GENERATE 1-2 a A 1.2.3.4\n@ IN DNAME x\n";
    let found = problems(text);
    let lines: Vec<u32> = found.iter().map(|p| p.line).collect();
    assert_eq!(lines, vec![2, 4, 5, 6], "{found:#?}");
    assert!(found[1].message.contains("unknown record type 'FOO'"));
    assert!(found[2].message.contains("unsupported directive $GENERATE"));
    assert!(found[3].message.contains("DNAME"));
    assert!(found.iter().all(|p| p.file == path() && p.is_error()));
}

#[test]
fn hostile_syntax_is_reported_not_panicked() {
    let cases: [(&str, u32, &str); 10] = [
        (
            "$TTL 60\n@ IN TXT \"open\n@ IN A 192.0.2.1\n",
            2,
            "unterminated quoted string",
        ),
        (
            "$TTL 60\n@ IN SOA ( a b\n1 2 3 4 5\n",
            2,
            "'(' is never closed",
        ),
        ("$TTL 60\n@ IN A 192.0.2.1 )\n", 2, "')' without"),
        (
            "$TTL 60\n@ IN MX 99999999999999999999999 mx\n",
            2,
            "preference",
        ),
        (
            "$TTL 60\n@ IN 99999999999999999999 A 192.0.2.1\n",
            2,
            "above the limit",
        ),
        (
            "$TTL 60\n@ 99999999999999999999s IN A 192.0.2.1\n",
            2,
            "above the limit",
        ),
        ("$TTL 60\nx\\1 IN A 192.0.2.1\n", 2, "three decimal digits"),
        ("$TTL 60\n@ IN TXT x\\\n", 2, "backslash"),
        (
            "$TTL 60\n\u{1}\u{2} IN A 192.0.2.1\n",
            2,
            "control character 0x01",
        ),
        ("$TTL 60\nwww.bücher IN A 192.0.2.1\n", 2, "punycode"),
    ];
    for (text, line, needle) in cases {
        let found = problems(text);
        assert!(
            found
                .iter()
                .any(|p| p.line == line && p.message.contains(needle)),
            "{text:?}: expected line {line} '{needle}', got {found:#?}"
        );
    }
}

#[test]
fn binary_garbage_never_panics_and_problems_are_capped() {
    // A fixed-seed xorshift keeps the test deterministic.
    let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let alphabet = b"$@()\";\\.\n\r\t 0123456789aAzZ:-_#INTXTSOA\x00\xff\x80";
    for round in 0..400 {
        let len = (next() % 200) as usize;
        let bytes: Vec<u8> = (0..len)
            .map(|_| {
                if round % 2 == 0 {
                    alphabet[(next() % alphabet.len() as u64) as usize]
                } else {
                    next() as u8
                }
            })
            .collect();
        let _ = parse_zone_bytes(&bytes, &path(), &origin());
    }
    let many = "@ IN A nonsense\n".repeat(500);
    let found = problems(&many);
    assert_eq!(found.len(), MAX_PROBLEMS + 1);
    assert!(found[MAX_PROBLEMS].message.contains("giving up"));
}

#[test]
fn hickory_type_errors_are_problems() {
    for text in [
        "@ IN SSHFP x y z",
        "@ IN TLSA 3 1",
        "@ IN HTTPS 1 . alpn=",
        "@ IN HTTPS",
        "@ IN CAA 0 bad-tag x",
    ] {
        let found = problems(&format!("$TTL 60\n{text}\n"));
        assert_eq!(found[0].line, 2, "{text}: {found:#?}");
    }
}

#[test]
fn problem_display_names_file_line_and_severity() {
    let error = ZoneProblem::error(
        "zones/example.com.zone",
        12,
        "CNAME beside other data at www.example.com.",
    );
    assert_eq!(
        error.to_string(),
        "zones/example.com.zone:12: error: CNAME beside other data at www.example.com."
    );
    let warning = ZoneProblem::warning("zones/example.com.zone", 0, "no NS records");
    assert_eq!(
        warning.to_string(),
        "zones/example.com.zone: warning: no NS records"
    );
}

#[test]
fn origin_from_file_names() {
    assert_eq!(
        origin_from_file_name(Path::new("zones/example.com.zone")),
        Some(name("example.com."))
    );
    assert_eq!(
        origin_from_file_name(Path::new("2.0.192.in-addr.arpa.zone")),
        Some(name("2.0.192.in-addr.arpa."))
    );
    assert_eq!(
        origin_from_file_name(Path::new("zones/example.com.txt")),
        None
    );
    assert_eq!(origin_from_file_name(Path::new("zones/.zone")), None);
    assert_eq!(origin_from_file_name(Path::new("zones/a..b.zone")), None);
}

#[test]
fn zone_dir_loading() {
    let dir = TempDir::new("dir");
    dir.write("b.example.zone", "$TTL 60\n@ IN A 192.0.2.1\n");
    dir.write("a.example.zone", "$TTL 60\n@ IN A 192.0.2.2\n");
    dir.write("a.example..zone", "$TTL 60\n@ IN A 192.0.2.3\n");
    // A duplicate of a file that fails to parse is still a duplicate.
    dir.write("d.example..zone", "@ IN A 192.0.2.4\n");
    dir.write("d.example.zone", "$TTL 60\n@ IN A 192.0.2.5\n");
    let broken = dir.write("c.example.zone", "$TTL 60\n\n@ IN A nope\n");
    dir.write("notes.txt", "not a zone");
    let (zones, found) = load_zone_dir(&dir.0);
    let origins: Vec<String> = zones.iter().map(|z| z.origin.to_ascii()).collect();
    assert_eq!(origins, vec!["a.example.", "b.example."]);
    assert_eq!(found.len(), 4, "{found:#?}");
    assert!(found[2].message.contains("no TTL"), "{}", found[2]);
    let duplicate = &found[3];
    assert!(
        duplicate
            .message
            .contains("zone d.example. is also loaded from"),
        "{duplicate}"
    );
    assert!(
        found[0].message.contains("also loaded from"),
        "{}",
        found[0]
    );
    assert_eq!((found[1].file.clone(), found[1].line), (broken, 3));

    let (zones, found) = load_zone_dir(&dir.0.join("missing"));
    assert!(zones.is_empty());
    assert!(
        found[0].message.contains("cannot read zone directory"),
        "{}",
        found[0]
    );
}
