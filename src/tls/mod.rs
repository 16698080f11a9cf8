//! TLS material for the encrypted transports (`[server.tls]`): reads a PEM certificate chain
//! and private key, checks that the key belongs to the leaf certificate, and reads the leaf's
//! validity period (for `steerdns check`'s expiry warning, status and metrics).
//!
//! A [`Material`] is built whole during a load, off the serving path, and carried by the
//! snapshot: a new certificate goes into service with the rest of a reload, and a bad one
//! (unreadable, mismatched) refuses the reload like any other bad input.

mod der;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use tokio_rustls::rustls;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::sign::CertifiedKey;

/// A certificate expiring within this many days is warned about (check, load, status).
pub const EXPIRY_WARNING_DAYS: i64 = 30;

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("{path}: cannot read: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: no PEM certificate in it")]
    NoCertificate { path: PathBuf },
    #[error("{path}: bad PEM: {message}")]
    Pem { path: PathBuf, message: String },
    #[error("{path}: no PEM private key in it (PKCS#8, PKCS#1 or SEC1)")]
    NoKey { path: PathBuf },
    #[error("{cert} and {key}: {message}")]
    Mismatch {
        cert: PathBuf,
        key: PathBuf,
        message: String,
    },
    #[error("{path}: cannot read the certificate's validity period: {message}")]
    Validity { path: PathBuf, message: String },
}

/// A certificate chain with its key, ready for rustls, and what status shows of it.
#[derive(Debug)]
pub struct Material {
    pub certified: Arc<CertifiedKey>,
    pub cert_path: PathBuf,
    pub key_path: PathBuf,
    /// The leaf's validity period, Unix seconds.
    pub not_before: i64,
    pub not_after: i64,
}

impl Material {
    /// Reads and checks `cert` (PEM chain, leaf first) and `key` (PEM private key).
    pub fn load(cert: &Path, key: &Path) -> Result<Material, TlsError> {
        let read = |path: &Path| {
            crate::files::read_limited(path, 1 << 20).map_err(|source| TlsError::Read {
                path: path.to_path_buf(),
                source,
            })
        };
        let cert_pem = read(cert)?;
        let key_pem = read(key)?;
        let chain = CertificateDer::pem_slice_iter(&cert_pem)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| TlsError::Pem {
                path: cert.to_path_buf(),
                message: e.to_string(),
            })?;
        let Some(leaf) = chain.first() else {
            return Err(TlsError::NoCertificate {
                path: cert.to_path_buf(),
            });
        };
        let validity = der::validity(leaf).map_err(|message| TlsError::Validity {
            path: cert.to_path_buf(),
            message: message.to_string(),
        })?;
        let private = PrivateKeyDer::from_pem_slice(&key_pem).map_err(|e| match e {
            rustls::pki_types::pem::Error::NoItemsFound => TlsError::NoKey {
                path: key.to_path_buf(),
            },
            e => TlsError::Pem {
                path: key.to_path_buf(),
                message: e.to_string(),
            },
        })?;
        let provider = rustls::crypto::ring::default_provider();
        let certified =
            CertifiedKey::from_der(chain, private, &provider).map_err(|e| TlsError::Mismatch {
                cert: cert.to_path_buf(),
                key: key.to_path_buf(),
                message: match e {
                    rustls::Error::InconsistentKeys(_) => {
                        "the private key does not belong to the (first) certificate".into()
                    }
                    e => format!("unusable key: {e}"),
                },
            })?;
        Ok(Material {
            certified: Arc::new(certified),
            cert_path: cert.to_path_buf(),
            key_path: key.to_path_buf(),
            not_before: validity.0,
            not_after: validity.1,
        })
    }

    /// Whole days until the certificate expires at `now` (Unix seconds); negative once expired.
    pub fn days_left(&self, now: i64) -> i64 {
        (self.not_after - now).div_euclid(86_400)
    }

    /// A warning when the certificate is expired, not yet valid or expires soon.
    pub fn warning(&self, now: i64) -> Option<String> {
        let path = self.cert_path.display();
        let days = self.days_left(now);
        if now >= self.not_after {
            Some(format!(
                "{path}: the certificate expired {} day(s) ago; clients that authenticate the \
                 server will refuse it",
                -days
            ))
        } else if now < self.not_before {
            Some(format!("{path}: the certificate is not valid yet"))
        } else if days < EXPIRY_WARNING_DAYS {
            Some(format!("{path}: the certificate expires in {days} day(s)"))
        } else {
            None
        }
    }
}

/// Seconds since the Unix epoch.
pub fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}
