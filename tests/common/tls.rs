//! TLS clients of the tests' own (rustls with ring, as the server): a client configuration that
//! trusts a test's self-signed certificate for "ns1.example.net" (see
//! [`super::self_signed_cert`]), offering one ALPN protocol.

use std::path::Path;
use std::sync::Arc;

use tokio_rustls::rustls;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, ServerName};

/// A TLS 1.3 client configuration trusting `cert` and offering `alpn` ("dot", "h2", "doq").
pub fn client_config(cert: &Path, alpn: &[u8]) -> rustls::ClientConfig {
    let mut roots = rustls::RootCertStore::empty();
    let der = CertificateDer::from_pem_file(cert).expect("the test's certificate");
    roots.add(der).expect("a usable root");
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])
        .expect("TLS 1.3")
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![alpn.to_vec()];
    config
}

/// The name the test certificates are issued for.
pub fn server_name() -> ServerName<'static> {
    ServerName::try_from("ns1.example.net").expect("a DNS name")
}
