//! TSIG against queries kdig and dig signed (tests/fixtures/tsig, see its README), and this
//! module's own signing checked by its own verifying across a multi-message stream.

use super::*;

const KDIG_SHA256: &[u8] = include_bytes!("../../../tests/fixtures/tsig/kdig_sha256_soa.bin");
const DIG_SHA512: &[u8] = include_bytes!("../../../tests/fixtures/tsig/dig_sha512_soa.bin");

fn key256() -> Key {
    let secret = data_encoding::BASE64
        .decode(b"c2VjcmV0LXNlY3JldC1zZWNyZXQtc2VjcmV0LTEyMzQ=")
        .expect("fixture secret");
    Key::new("transfer-key", Algorithm::HmacSha256, &secret).expect("key")
}

fn key512() -> Key {
    let secret = data_encoding::BASE64
        .decode(b"c2VjcmV0LXNlY3JldC1zZWNyZXQtc2VjcmV0LTEyMzQ1Njc4OTA=")
        .expect("fixture secret");
    Key::new("other.key", Algorithm::HmacSha512, &secret).expect("key")
}

fn signed_time(msg: &[u8]) -> u64 {
    find(msg).expect("well formed").expect("signed").time_signed
}

#[test]
fn a_kdig_signed_query_verifies() {
    let keys = [key512(), key256()];
    let now = signed_time(KDIG_SHA256);
    match verify_request(KDIG_SHA256, &keys, now + 10).expect("well formed") {
        Verdict::Signed { key, request_mac } => {
            assert_eq!(key, 1);
            assert_eq!(request_mac.len(), 32);
        }
        other => panic!("not verified: {other:?}"),
    }
}

#[test]
fn a_dig_sha512_query_with_a_mixed_case_key_name_verifies() {
    let keys = [key256(), key512()];
    let now = signed_time(DIG_SHA512);
    assert!(matches!(
        verify_request(DIG_SHA512, &keys, now).expect("well formed"),
        Verdict::Signed { key: 1, .. }
    ));
}

#[test]
fn a_changed_byte_is_badsig_an_unknown_key_badkey_a_late_clock_badtime() {
    let now = signed_time(KDIG_SHA256);
    let mut tampered = KDIG_SHA256.to_vec();
    tampered[2] ^= 0x01; // the RD flag
    let error_of = |msg: &[u8], keys: &[Key], now| match verify_request(msg, keys, now) {
        Ok(Verdict::Refused(r)) => r.error,
        other => panic!("not refused: {other:?}"),
    };
    assert_eq!(error_of(&tampered, &[key256()], now), error::BADSIG);
    assert_eq!(error_of(KDIG_SHA256, &[key512()], now), error::BADKEY);
    assert_eq!(
        error_of(KDIG_SHA256, &[key256()], now + 301),
        error::BADTIME
    );
}

#[test]
fn an_unsigned_query_is_unsigned_and_a_cut_tsig_malformed() {
    let record = find(KDIG_SHA256).expect("ok").expect("signed");
    let mut unsigned = KDIG_SHA256[..record.start].to_vec();
    unsigned[11] -= 1;
    assert_eq!(
        verify_request(&unsigned, &[key256()], 0),
        Ok(Verdict::Unsigned)
    );
    assert_eq!(
        verify_request(&KDIG_SHA256[..KDIG_SHA256.len() - 3], &[key256()], 0),
        Err(Malformed)
    );
}

/// A minimal answer message: header with `id`, one question for example.com SOA.
fn message(id: u16, answers: u16) -> Vec<u8> {
    let mut m = id.to_be_bytes().to_vec();
    m.extend_from_slice(&[0x84, 0, 0, 1]);
    m.extend_from_slice(&answers.to_be_bytes());
    m.extend_from_slice(&[0, 0, 0, 0]);
    m.extend_from_slice(b"\x07example\x03com\x00\x00\x06\x00\x01");
    m
}

#[test]
fn a_signed_stream_verifies_message_by_message_and_not_out_of_order() {
    let key = key256();
    let mut request = message(7, 0);
    let request_mac = sign_request(&mut request, &key, 1_000_000);
    let Ok(Verdict::Signed {
        request_mac: seen, ..
    }) = verify_request(&request, std::slice::from_ref(&key), 1_000_010)
    else {
        panic!("own request not verified");
    };
    assert_eq!(seen, request_mac);
    let mut signer = Signer::for_answer_of(&key, &request_mac);
    let mut stream = Vec::new();
    for i in 0..3 {
        let mut m = message(7, 0);
        m[3] = i; // messages of a stream differ
        signer.sign(&mut m, 1_000_001);
        stream.push(m);
    }
    let mut client = Signer::for_answer_of(&key, &request_mac);
    for m in &stream {
        assert_eq!(client.verify(m, 1_000_002), Ok(()));
    }
    let mut reordered = Signer::for_answer_of(&key, &request_mac);
    assert_eq!(
        reordered.verify(&stream[1], 1_000_002),
        Err(AnswerError::BadSig)
    );
}

#[test]
fn a_badkey_answer_is_unsigned_and_a_badtime_answer_signed_with_the_server_time() {
    let now = signed_time(KDIG_SHA256);
    let Ok(Verdict::Refused(refusal)) = verify_request(KDIG_SHA256, &[key512()], now) else {
        panic!("not refused");
    };
    let mut answer = message(1, 0);
    error_answer(&mut answer, &refusal, &[key512()], now);
    let record = find(&answer).expect("ok").expect("tsig");
    assert_eq!((record.error, record.mac.len()), (error::BADKEY, 0));

    let late = now + 1000;
    let Ok(Verdict::Refused(refusal)) = verify_request(KDIG_SHA256, &[key256()], late) else {
        panic!("not refused");
    };
    let mut answer = message(1, 0);
    error_answer(&mut answer, &refusal, &[key256()], late);
    let record = find(&answer).expect("ok").expect("tsig");
    assert_eq!(record.error, error::BADTIME);
    assert_eq!(record.mac.len(), 32);
    assert_eq!(record.other, late.to_be_bytes()[2..].to_vec());
}

#[test]
fn key_files_in_bind_format_parse_and_bad_ones_name_the_line() {
    let text = "# made by tsig-keygen\nkey \"transfer-key\" {\n\talgorithm hmac-sha256;\n\tsecret \"c2VjcmV0LXNlY3JldC1zZWNyZXQtc2VjcmV0LTEyMzQ=\";\n};\n// another\nkey other.key { algorithm hmac-sha512; secret \"c2VjcmV0LXNlY3JldC1zZWNyZXQtc2VjcmV0LTEyMzQ1Njc4OTA=\"; };\n";
    let keys = parse_keys(text).expect("parses");
    assert_eq!(keys.len(), 2);
    assert_eq!(keys[1].algorithm, Algorithm::HmacSha512);
    let now = signed_time(KDIG_SHA256);
    assert!(matches!(
        verify_request(KDIG_SHA256, &keys, now),
        Ok(Verdict::Signed { key: 0, .. })
    ));
    let bad = "key k {\n algorithm hmac-md5;\n secret \"AAAA\";\n};\n";
    let (line, message) = parse_keys(bad).expect_err("refused");
    assert_eq!(line, 2, "{message}");
    assert!(message.contains("hmac-md5"), "{message}");
    let (line, _) = parse_keys("key k {\n algorithm hmac-sha256;\n};").expect_err("refused");
    assert_eq!(line, 1);
}

#[test]
fn a_key_file_others_may_read_is_refused() {
    let dir = std::env::temp_dir().join(format!("steerdns-tsig-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("tempdir");
    let path = dir.join("k.key");
    std::fs::write(
        &path,
        "key k { algorithm hmac-sha256; secret \"c2VjcmV0LXNlY3JldC1zZWNyZXQtc2VjcmV0LTEyMzQ=\"; };",
    )
    .expect("write");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    assert!(matches!(
        read_key_file(&path),
        Err(KeyFileError::Permissions { .. })
    ));
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    assert_eq!(read_key_file(&path).expect("read").len(), 1);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The query kdig signed, unsigned again and signed here: byte for byte the same message.
#[test]
fn signing_reproduces_the_kdig_mac() {
    let record = find(KDIG_SHA256).expect("ok").expect("signed");
    let mut msg = unsigned_message(KDIG_SHA256, &record);
    let mac = sign_request(&mut msg, &key256(), record.time_signed);
    assert_eq!(mac, record.mac);
    assert_eq!(msg, KDIG_SHA256);
}

/// An AXFR query kdig signed with hmac-sha512 and a key name with a final dot.
#[test]
fn a_kdig_sha512_axfr_query_verifies() {
    const KDIG_AXFR: &[u8] = include_bytes!("../../../tests/fixtures/tsig/kdig_sha512.bin");
    let secret = [b"steerdns-test-vector-secret-64by".as_slice(); 2].concat();
    let key = Key::new("other-key.example.", Algorithm::HmacSha512, &secret).expect("key");
    let now = signed_time(KDIG_AXFR);
    assert!(matches!(
        verify_request(KDIG_AXFR, &[key256(), key], now),
        Ok(Verdict::Signed { key: 1, .. })
    ));
}

/// RFC 8945 5.3.1 on the client side: a later message may come unsigned and is covered by the
/// next MAC; an unsigned first or last message, a tampered unsigned one and a run of 100
/// unsigned messages are refused.
#[test]
fn a_stream_with_unsigned_messages_between_macs_verifies_and_gaps_are_refused() {
    let key = key256();
    let mut request = message(9, 0);
    let request_mac = sign_request(&mut request, &key, 1_000_000);
    // The server side: messages 0 and 3 signed, 1 and 2 digested into 3's MAC.
    let mut server = Signer::for_answer_of(&key, &request_mac);
    let mut stream: Vec<Vec<u8>> = (0..4u8)
        .map(|i| {
            let mut m = message(9, 0);
            m[3] = i;
            m
        })
        .collect();
    server.sign(&mut stream[0], 1_000_001);
    server.unsigned = [stream[1].clone(), stream[2].clone()].concat();
    server.sign(&mut stream[3], 1_000_001);

    let mut client = Signer::for_answer_of(&key, &request_mac);
    for m in &stream {
        assert_eq!(client.verify_next(m, 1_000_002), Ok(()));
    }
    assert_eq!(client.finish(), Ok(()));

    let mut tampered = Signer::for_answer_of(&key, &request_mac);
    let mut altered = stream.clone();
    altered[2][3] ^= 0x40;
    let results: Vec<_> = altered
        .iter()
        .map(|m| tampered.verify_next(m, 1_000_002))
        .collect();
    assert_eq!(results[3], Err(AnswerError::BadSig));

    let mut unsigned_first = Signer::for_answer_of(&key, &request_mac);
    assert_eq!(
        unsigned_first.verify_next(&stream[1], 1_000_002),
        Err(AnswerError::Unsigned)
    );
    let mut open_end = Signer::for_answer_of(&key, &request_mac);
    for m in &stream[..3] {
        assert_eq!(open_end.verify_next(m, 1_000_002), Ok(()));
    }
    assert_eq!(open_end.finish(), Err(AnswerError::Unsigned));

    let mut long_gap = Signer::for_answer_of(&key, &request_mac);
    assert_eq!(long_gap.verify_next(&stream[0], 1_000_002), Ok(()));
    for _ in 0..99 {
        assert_eq!(long_gap.verify_next(&stream[1], 1_000_002), Ok(()));
    }
    assert_eq!(
        long_gap.verify_next(&stream[1], 1_000_002),
        Err(AnswerError::TooManyUnsigned)
    );
}
