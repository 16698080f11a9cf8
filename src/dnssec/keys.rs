//! Zone keys: generating them, the key files in the key directory, DNSKEY/DS/CDS records.
//!
//! One file per key, `K<zone>+<alg>+<tag>.toml`, mode 0600: the zone, algorithm, role (CSK,
//! KSK or ZSK), the private key (PKCS#8, base64) and its lifecycle times (publish, activate,
//! retire, remove; Unix seconds), which the automatic rollover ([`super::rollover`]) moves
//! forward and writes back, so a restarted server resumes a rollover where it was.

use std::fmt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use data_encoding::BASE64;
use p256::pkcs8::DecodePrivateKey;
use ring::rand::SystemRandom;
use ring::signature::{EcdsaKeyPair, Ed25519KeyPair, KeyPair, ECDSA_P256_SHA256_FIXED_SIGNING};
use serde::{Deserialize, Serialize};

/// DNSSEC algorithm numbers we sign with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Algorithm {
    /// 13: ECDSA P-256 with SHA-256.
    EcdsaP256Sha256,
    /// 15: Ed25519.
    Ed25519,
}

impl Algorithm {
    pub fn from_number(n: u8) -> Option<Algorithm> {
        match n {
            13 => Some(Algorithm::EcdsaP256Sha256),
            15 => Some(Algorithm::Ed25519),
            _ => None,
        }
    }

    pub fn number(self) -> u8 {
        match self {
            Algorithm::EcdsaP256Sha256 => 13,
            Algorithm::Ed25519 => 15,
        }
    }

    /// `13 (ECDSA P-256)`, `15 (Ed25519)`: for messages.
    pub fn describe(self) -> String {
        let name = match self {
            Algorithm::EcdsaP256Sha256 => "ECDSA P-256",
            Algorithm::Ed25519 => "Ed25519",
        };
        format!("{} ({name})", self.number())
    }
}

/// What a key signs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Combined signing key: the DNSKEY RRset and everything else (flags 257).
    Csk,
    /// Key signing key: the DNSKEY, CDS and CDNSKEY RRsets (flags 257).
    Ksk,
    /// Zone signing key: every other RRset (flags 256).
    Zsk,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Csk => "csk",
            Role::Ksk => "ksk",
            Role::Zsk => "zsk",
        }
    }

    /// Signs the DNSKEY RRset (and CDS/CDNSKEY), and is what the parent's DS points at.
    pub fn signs_keys(self) -> bool {
        matches!(self, Role::Csk | Role::Ksk)
    }

    /// Signs the zone's other RRsets.
    pub fn signs_zone(self) -> bool {
        matches!(self, Role::Csk | Role::Zsk)
    }
}

/// A key's lifecycle (Unix seconds).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Timing {
    pub created: u64,
    /// In the DNSKEY RRset from here...
    pub publish: u64,
    /// ...signing from here...
    pub activate: u64,
    /// ...no longer signing from here...
    pub retire: Option<u64>,
    /// ...and gone from the DNSKEY RRset from here.
    pub remove: Option<u64>,
}

impl Timing {
    pub fn published(&self, now: u64) -> bool {
        self.publish <= now && !self.removed(now)
    }

    /// Whether the key is gone from the DNSKEY RRset for good at `now`.
    pub fn removed(&self, now: u64) -> bool {
        self.remove.is_some_and(|r| r <= now)
    }

    pub fn active(&self, now: u64) -> bool {
        self.activate <= now && self.retire.is_none_or(|r| now < r)
    }

    /// The key's state at `now`: created (not yet published), published (not yet signing),
    /// active, retired (published, no longer signing) or removed.
    pub fn state(&self, now: u64) -> &'static str {
        match (self.published(now), self.active(now)) {
            (true, true) => "active",
            (true, false) if self.activate > now => "published",
            (true, false) => "retired",
            (false, _) if self.publish > now => "created",
            (false, _) => "removed",
        }
    }

    /// The key's next event after `now`: (when, what).
    pub fn next_event(&self, now: u64) -> Option<(u64, &'static str)> {
        [
            (Some(self.publish), "publish"),
            (Some(self.activate), "activate"),
            (self.retire, "retire"),
            (self.remove, "remove"),
        ]
        .into_iter()
        .filter_map(|(at, what)| Some((at?, what)))
        .filter(|(at, _)| *at > now)
        .min_by_key(|(at, _)| *at)
    }

    /// The times at which this key changes state.
    pub fn events(&self) -> impl Iterator<Item = u64> {
        [
            Some(self.publish),
            Some(self.activate),
            self.retire,
            self.remove,
        ]
        .into_iter()
        .flatten()
    }
}

#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    #[error("{path}: cannot read the key directory: {source}")]
    Dir {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: cannot read: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: cannot write: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(transparent)]
    Replace(#[from] crate::files::WriteError),
    #[error("{path}: {message}")]
    Bad { path: PathBuf, message: String },
    #[error("{path}: readable by group or others (mode {mode:o}); private keys must be 0600")]
    Permissions { path: PathBuf, mode: u32 },
    #[error("{dir}: no key for zone {zone} (make one with `steerdns dnssec keygen {zone}`)")]
    Missing { dir: PathBuf, zone: String },
    #[error("{dir}: zone {zone}: {message}")]
    Unusable {
        dir: PathBuf,
        zone: String,
        message: String,
    },
    #[error("cannot generate or use a key: {0}")]
    Crypto(String),
}

/// The signing half of a key. ECDSA signs with RFC 6979 deterministic nonces (p256, RustCrypto):
/// ring draws a random nonce, so two nodes signing the same data would send different RRSIGs.
/// With a nonce derived from the key and the data, every node of a fleet holding the same key
/// file sends byte-identical signatures for the same data and window. Ed25519 is deterministic
/// by definition (RFC 8032).
enum Pair {
    Ecdsa(Box<p256::ecdsa::SigningKey>),
    Ed25519(Ed25519KeyPair),
}

/// A loaded zone key.
pub struct Key {
    pub path: PathBuf,
    /// The zone, lower-cased, absolute (`example.com.`).
    pub zone: String,
    pub algorithm: Algorithm,
    pub role: Role,
    pub tag: u16,
    /// The DNSKEY public key field.
    pub public: Vec<u8>,
    pub timing: Timing,
    pkcs8: Vec<u8>,
    pair: Pair,
}

impl fmt::Debug for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Key")
            .field("zone", &self.zone)
            .field("algorithm", &self.algorithm)
            .field("role", &self.role)
            .field("tag", &self.tag)
            .field("timing", &self.timing)
            .finish_non_exhaustive()
    }
}

/// The key file's contents.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct KeyFile {
    zone: String,
    algorithm: u8,
    role: Role,
    tag: u16,
    /// PKCS#8, base64.
    private_key: String,
    created: u64,
    publish: u64,
    activate: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    retire: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    remove: Option<u64>,
}

/// The absolute, lower-cased form of a zone name given on the command line or in config.
pub fn normalize_zone(zone: &str) -> String {
    let mut zone = zone.to_ascii_lowercase();
    if !zone.ends_with('.') {
        zone.push('.');
    }
    zone
}

impl Key {
    fn from_pkcs8(
        path: PathBuf,
        zone: String,
        algorithm: Algorithm,
        role: Role,
        pkcs8: Vec<u8>,
        timing: Timing,
    ) -> Result<Key, String> {
        let (pair, public) = match algorithm {
            Algorithm::EcdsaP256Sha256 => {
                let pair = p256::ecdsa::SigningKey::from_pkcs8_der(&pkcs8)
                    .map_err(|e| format!("not an ECDSA P-256 private key: {e}"))?;
                // Uncompressed point 0x04 || X || Y; DNSKEY carries X || Y (RFC 6605 §4).
                let point = pair.verifying_key().to_encoded_point(false);
                let public = point.as_bytes().get(1..).unwrap_or_default().to_vec();
                (Pair::Ecdsa(Box::new(pair)), public)
            }
            Algorithm::Ed25519 => {
                let pair = Ed25519KeyPair::from_pkcs8_maybe_unchecked(&pkcs8)
                    .map_err(|e| format!("not an Ed25519 private key: {e}"))?;
                let public = pair.public_key().as_ref().to_vec();
                (Pair::Ed25519(pair), public)
            }
        };
        let mut key = Key {
            path,
            zone,
            algorithm,
            role,
            tag: 0,
            public,
            timing,
            pkcs8,
            pair,
        };
        key.tag = key_tag(&key.dnskey_rdata());
        Ok(key)
    }

    /// DNSKEY flags: zone key, plus SEP for a key the parent's DS points at.
    pub fn flags(&self) -> u16 {
        if self.role.signs_keys() {
            257
        } else {
            256
        }
    }

    /// The DNSKEY (and CDNSKEY) RDATA.
    pub fn dnskey_rdata(&self) -> Vec<u8> {
        let mut rdata = Vec::with_capacity(4 + self.public.len());
        rdata.extend_from_slice(&self.flags().to_be_bytes());
        rdata.push(3);
        rdata.push(self.algorithm.number());
        rdata.extend_from_slice(&self.public);
        rdata
    }

    /// The DS (and CDS) RDATA with a SHA-256 digest (digest type 2), for owner `apex` (wire).
    pub fn ds_rdata(&self, apex: &[u8]) -> Vec<u8> {
        let mut input = apex.to_ascii_lowercase();
        input.extend_from_slice(&self.dnskey_rdata());
        let digest = ring::digest::digest(&ring::digest::SHA256, &input);
        let mut rdata = Vec::with_capacity(4 + 32);
        rdata.extend_from_slice(&self.tag.to_be_bytes());
        rdata.push(self.algorithm.number());
        rdata.push(2);
        rdata.extend_from_slice(digest.as_ref());
        rdata
    }

    /// The DS in zone-file form.
    pub fn ds_text(&self, apex: &[u8]) -> String {
        let rdata = self.ds_rdata(apex);
        format!(
            "{} IN DS {} {} 2 {}",
            self.zone,
            self.tag,
            self.algorithm.number(),
            data_encoding::HEXUPPER.encode(rdata.get(4..).unwrap_or_default())
        )
    }

    /// The DNSKEY in zone-file form (with `ttl`).
    pub fn dnskey_text(&self, ttl: u32) -> String {
        format!(
            "{} {ttl} IN DNSKEY {} 3 {} {}",
            self.zone,
            self.flags(),
            self.algorithm.number(),
            BASE64.encode(&self.public)
        )
    }

    /// Signs `data`: 64 bytes for both algorithms (ECDSA r || s, RFC 6605; Ed25519, RFC 8080).
    /// Deterministic: the same key and data give the same bytes, on every node.
    pub fn sign(&self, data: &[u8]) -> Result<Vec<u8>, KeyError> {
        match &self.pair {
            Pair::Ecdsa(pair) => {
                use p256::ecdsa::signature::Signer;
                let signature: p256::ecdsa::Signature = pair
                    .try_sign(data)
                    .map_err(|e| KeyError::Crypto(format!("ECDSA signing failed: {e}")))?;
                Ok(signature.to_bytes().to_vec())
            }
            Pair::Ed25519(pair) => Ok(pair.sign(data).as_ref().to_vec()),
        }
    }

    /// Writes the key file (new or updated timing), 0600, atomically ([`crate::files::replace_private_file`]).
    pub fn save(&self) -> Result<(), KeyError> {
        let file = KeyFile {
            zone: self.zone.clone(),
            algorithm: self.algorithm.number(),
            role: self.role,
            tag: self.tag,
            private_key: BASE64.encode(&self.pkcs8),
            created: self.timing.created,
            publish: self.timing.publish,
            activate: self.timing.activate,
            retire: self.timing.retire,
            remove: self.timing.remove,
        };
        let text = toml::to_string(&file).map_err(|e| KeyError::Bad {
            path: self.path.clone(),
            message: e.to_string(),
        })?;
        let text = format!(
            "# steerdns DNSSEC key ({} {}, tag {}). Private: keep it 0600.\n{text}",
            self.zone,
            self.role.as_str(),
            self.tag
        );
        // Two nodes (or a node and `keygen`) may save the same key: each writes its own
        // temporary file, and the rename and the directory are flushed before this returns.
        crate::files::replace_private_file(&self.path, text.as_bytes())?;
        Ok(())
    }
}

/// RFC 4034 Appendix B key tag of a DNSKEY RDATA.
pub fn key_tag(rdata: &[u8]) -> u16 {
    let mut ac: u32 = 0;
    for (i, &b) in rdata.iter().enumerate() {
        ac += if i & 1 == 1 {
            u32::from(b)
        } else {
            u32::from(b) << 8
        };
    }
    ac += (ac >> 16) & 0xFFFF;
    (ac & 0xFFFF) as u16
}

/// Makes a new key for `zone` in `dir` (created 0700 if missing), published and active from
/// `now` unless `timing` says otherwise, and writes its file.
pub fn generate(
    dir: &Path,
    zone: &str,
    algorithm: Algorithm,
    role: Role,
    timing: Timing,
) -> Result<Key, KeyError> {
    let zone = normalize_zone(zone);
    let rng = SystemRandom::new();
    let pkcs8 = match algorithm {
        Algorithm::EcdsaP256Sha256 => {
            EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &rng)
                .map_err(|e| KeyError::Crypto(e.to_string()))?
                .as_ref()
                .to_vec()
        }
        Algorithm::Ed25519 => Ed25519KeyPair::generate_pkcs8(&rng)
            .map_err(|e| KeyError::Crypto(e.to_string()))?
            .as_ref()
            .to_vec(),
    };
    if !dir.exists() {
        std::fs::create_dir_all(dir).map_err(|source| KeyError::Write {
            path: dir.to_path_buf(),
            source,
        })?;
        let _ = std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700));
    }
    let key = from_parts(dir, &zone, algorithm, role, pkcs8, timing)?;
    if key.path.exists() {
        return Err(KeyError::Bad {
            path: key.path.clone(),
            message: "a key with this tag already exists; run keygen again".into(),
        });
    }
    key.save()?;
    Ok(key)
}

/// A key of `zone` from its private key, with the path its file has in `dir` (not written).
pub fn from_parts(
    dir: &Path,
    zone: &str,
    algorithm: Algorithm,
    role: Role,
    pkcs8: Vec<u8>,
    timing: Timing,
) -> Result<Key, KeyError> {
    let mut key = Key::from_pkcs8(
        PathBuf::new(),
        normalize_zone(zone),
        algorithm,
        role,
        pkcs8,
        timing,
    )
    .map_err(KeyError::Crypto)?;
    key.path = dir.join(format!(
        "K{}+{:03}+{:05}.toml",
        key.zone,
        algorithm.number(),
        key.tag
    ));
    Ok(key)
}

/// Reads one key file.
pub fn read_key(path: &Path) -> Result<Key, KeyError> {
    let meta = std::fs::metadata(path).map_err(|source| KeyError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    let mode = meta.permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        return Err(KeyError::Permissions {
            path: path.to_path_buf(),
            mode,
        });
    }
    let text = crate::files::read_text_limited(path, crate::files::SMALL_FILE_LIMIT).map_err(
        |source| KeyError::Read {
            path: path.to_path_buf(),
            source,
        },
    )?;
    let bad = |message: String| KeyError::Bad {
        path: path.to_path_buf(),
        message,
    };
    let file: KeyFile = toml::from_str(&text).map_err(|e| bad(e.message().to_string()))?;
    let algorithm = Algorithm::from_number(file.algorithm)
        .ok_or_else(|| bad(format!("algorithm {} is not supported", file.algorithm)))?;
    let pkcs8 = BASE64
        .decode(file.private_key.trim().as_bytes())
        .map_err(|e| bad(format!("private_key: {e}")))?;
    let timing = Timing {
        created: file.created,
        publish: file.publish,
        activate: file.activate,
        retire: file.retire,
        remove: file.remove,
    };
    let key = Key::from_pkcs8(
        path.to_path_buf(),
        normalize_zone(&file.zone),
        algorithm,
        file.role,
        pkcs8,
        timing,
    )
    .map_err(&bad)?;
    if key.tag != file.tag {
        return Err(bad(format!(
            "tag {} does not match the key (its tag is {})",
            file.tag, key.tag
        )));
    }
    Ok(key)
}

/// Every key of `zone` in `dir`, oldest first. A missing directory or no key is an error
/// (signing cannot start without a key); so is any unreadable key file of the zone.
pub fn load_zone_keys(dir: &Path, zone: &str) -> Result<Vec<Key>, KeyError> {
    let zone = normalize_zone(zone);
    let prefix = format!("K{zone}+");
    let entries = std::fs::read_dir(dir).map_err(|source| KeyError::Dir {
        path: dir.to_path_buf(),
        source,
    })?;
    let mut keys = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|source| KeyError::Dir {
            path: dir.to_path_buf(),
            source,
        })?;
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if !(name
            .to_ascii_lowercase()
            .starts_with(&prefix.to_ascii_lowercase())
            && name.ends_with(".toml"))
        {
            continue;
        }
        let key = read_key(&entry.path())?;
        if key.zone != zone {
            return Err(KeyError::Bad {
                path: entry.path(),
                message: format!("holds a key of zone {}, not {zone}", key.zone),
            });
        }
        keys.push(key);
    }
    if keys.is_empty() {
        return Err(KeyError::Missing {
            dir: dir.to_path_buf(),
            zone,
        });
    }
    keys.sort_by_key(|k| (k.timing.created, k.tag));
    Ok(keys)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp_dir(label: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "steerdns-keys-{label}-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        dir
    }

    #[test]
    fn rfc4034_key_tag_and_ds_of_a_known_key() {
        // RFC 6605 §6.1: the example P-256 KSK of example.net. and its SHA-256 DS.
        let public = BASE64
            .decode(
                b"GojIhhXUN/u4v54ZQqGSnyhWJwaubCvTmeexv7bR6edbkrSqQpF64cYbcB7wNcP+e+MAnLr+Wi9xMWyQLc8NAA==",
            )
            .expect("base64");
        let mut rdata = vec![1, 1, 3, 13];
        rdata.extend_from_slice(&public);
        assert_eq!(key_tag(&rdata), 55648);
        let apex = b"\x07example\x03net\x00";
        let mut input = apex.to_vec();
        input.extend_from_slice(&rdata);
        let digest = ring::digest::digest(&ring::digest::SHA256, &input);
        assert_eq!(
            data_encoding::HEXUPPER.encode(digest.as_ref()),
            "B4C8C1FE2E7477127B27115656AD6256F424625BF5C1E2770CE6D6E37DF61D17"
        );
    }

    #[test]
    fn generated_keys_are_private_and_read_back() {
        let dir = temp_dir("gen");
        for (algorithm, role) in [
            (Algorithm::EcdsaP256Sha256, Role::Csk),
            (Algorithm::Ed25519, Role::Zsk),
        ] {
            let key =
                generate(&dir, "Example.COM", algorithm, role, Timing::default()).expect("keygen");
            let mode = std::fs::metadata(&key.path)
                .expect("file")
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600, "{:?}", key.path);
            let again = read_key(&key.path).expect("read back");
            assert_eq!(
                (again.tag, again.role, again.zone.as_str()),
                (key.tag, role, "example.com.")
            );
            assert_eq!(again.dnskey_rdata(), key.dnskey_rdata());
        }
        let keys = load_zone_keys(&dir, "example.com.").expect("both keys");
        assert_eq!(keys.len(), 2);
        assert!(matches!(
            load_zone_keys(&dir, "example.net."),
            Err(KeyError::Missing { .. })
        ));
        let path = &keys[0].path;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o644)).expect("chmod");
        assert!(matches!(read_key(path), Err(KeyError::Permissions { .. })));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn signatures_are_deterministic_and_verify() {
        let dir = temp_dir("det");
        for algorithm in [Algorithm::EcdsaP256Sha256, Algorithm::Ed25519] {
            let key = generate(
                &dir,
                "example.org.",
                algorithm,
                Role::Csk,
                Timing::default(),
            )
            .expect("keygen");
            // A second process would read the key file: so does this.
            let again = read_key(&key.path).expect("read back");
            let data = b"the same RRset, the same window";
            let sig = key.sign(data).expect("sign");
            assert_eq!(sig.len(), 64);
            assert_eq!(sig, again.sign(data).expect("sign again"), "{algorithm:?}");
            assert_ne!(sig, key.sign(b"other data").expect("sign"));
            // ring (an independent implementation) verifies what p256 signed.
            let (verifier, public): (&dyn ring::signature::VerificationAlgorithm, Vec<u8>) =
                match algorithm {
                    Algorithm::EcdsaP256Sha256 => (
                        &ring::signature::ECDSA_P256_SHA256_FIXED,
                        [&[4u8][..], &key.public].concat(),
                    ),
                    Algorithm::Ed25519 => (&ring::signature::ED25519, key.public.clone()),
                };
            ring::signature::UnparsedPublicKey::new(verifier, &public)
                .verify(data, &sig)
                .expect("verifies");
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}
