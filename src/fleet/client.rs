//! Connecting to etcd as `[fleet]` says: endpoints, timeouts, TLS (CA, client certificate),
//! user and password. Files are read here, so a missing certificate is a clear error naming it.

use etcd_client::{Certificate, Client, ConnectOptions, Identity, TlsOptions};

use super::session::{request_timeout, PING_EVERY};
use super::FleetError;
use crate::config::fleet::FleetConfig;

/// Connects (lazily: the first request finds out whether etcd answers).
pub async fn connect(config: &FleetConfig) -> Result<Client, FleetError> {
    let timeout = request_timeout(config);
    let mut options = ConnectOptions::new()
        .with_connect_timeout(timeout)
        .with_timeout(timeout)
        // HTTP/2 pings notice a dead peer (a partition, a killed etcd) on an idle connection.
        .with_keep_alive(PING_EVERY, timeout)
        .with_keep_alive_while_idle(true);
    if let (Some(user), Some(file)) = (&config.user, &config.password_file) {
        let text = read(file)?;
        let password = text.lines().next().unwrap_or("").trim().to_string();
        if password.is_empty() {
            return Err(FleetError::File {
                path: file.display().to_string(),
                message: "the etcd password file is empty".into(),
            });
        }
        options = options.with_user(user.clone(), password);
    }
    if config.ca_file.is_some() || config.cert_file.is_some() {
        let mut tls = TlsOptions::new();
        if let Some(ca) = &config.ca_file {
            tls = tls.ca_certificate(Certificate::from_pem(read(ca)?));
        }
        if let (Some(cert), Some(key)) = (&config.cert_file, &config.key_file) {
            tls = tls.identity(Identity::from_pem(read(cert)?, read(key)?));
        }
        if let Some(name) = &config.tls_server_name {
            tls = tls.domain_name(name.clone());
        }
        options = options.with_tls(tls);
    }
    let endpoints = config.etcd.clone();
    match tokio::time::timeout(timeout, Client::connect(&endpoints, Some(options))).await {
        Ok(Ok(client)) => Ok(client),
        Ok(Err(e)) => Err(unreachable(config, &e.to_string())),
        Err(_) => Err(unreachable(
            config,
            &format!("no answer within {timeout:?}"),
        )),
    }
}

/// An error saying which etcd could not be reached and why.
pub fn unreachable(config: &FleetConfig, message: &str) -> FleetError {
    FleetError::Unreachable {
        endpoints: config.etcd.join(","),
        message: message.to_string(),
    }
}

fn read(path: &std::path::Path) -> Result<String, FleetError> {
    crate::files::read_text_limited(path, 1 << 20).map_err(|e| FleetError::File {
        path: path.display().to_string(),
        message: format!("cannot read: {e}"),
    })
}

/// A lease of `[fleet] lease_ttl_secs` and its keep-alive channel: what every leased record of
/// a node (registry, leader keys, probe results, shield reports) hangs on.
pub struct Lease {
    pub id: i64,
    pub keeper: etcd_client::LeaseKeeper,
    pub keepalives: etcd_client::LeaseKeepAliveStream,
}

/// Grants a lease on `client` and opens its keep-alive channel; `whose` names it in errors
/// ("the health lease").
pub async fn grant_lease(
    config: &FleetConfig,
    client: &mut Client,
    whose: &str,
) -> Result<Lease, FleetError> {
    let ttl = config.lease_ttl_secs as i64;
    let id = super::within(
        config,
        &format!("granting {whose}"),
        client.lease_grant(ttl, None),
    )
    .await?
    .id();
    let (keeper, keepalives) = super::within(
        config,
        &format!("keeping {whose}"),
        client.lease_keep_alive(id),
    )
    .await?;
    Ok(Lease {
        id,
        keeper,
        keepalives,
    })
}
