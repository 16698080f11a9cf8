//! The tenants' admin API: `GET /v1/tenants` and `GET /v1/tenants/{name}` (what each tenant
//! serves and its last refusal; the latter with the document's store revision as `ETag`), and
//! the writes (token required, like every write): `PUT /v1/tenants/{name}` with the document
//! as TOML (`Content-Type: application/toml`, `text/plain` or none) or as a JSON object
//! (`application/json`, turned into the same TOML), `DELETE /v1/tenants/{name}`, and
//! `POST /v1/tenants/{name}/quarantine` / `release` (the document's `state` edited in place).
//!
//! A write goes through the keyed control store (key `tenants/<name>`: the file store writes
//! a temp file and renames it; the reloader records the history entry when it serves it),
//! compare-and-swap on the revision when the request carries `If-Match` (412 when it no longer
//! matches). The document is checked alone and tasted *before* anything is written (a bad
//! body: 400 when it is not a document at all, 422 with each problem's file, line and field),
//! and served by the time the response is sent: it travels to the tenant registry as a value
//! instead of waiting for the folder's next look.
//!
//! Owns only HTTP and the body formats; the checks, the taste and the swap are the registry's.

use axum::extract::{Path, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};

use super::AdminState;
use crate::config::Config;
use crate::control::store::{tenant_key, ControlStore, StoreError};
use crate::reload::tenants::PutError;
use crate::tenant::{valid_tenant_name, TenantState};

pub fn routes() -> Router<AdminState> {
    Router::new()
        .route("/v1/tenants", get(list))
        .route(
            "/v1/tenants/{name}",
            get(show).put(put_tenant).delete(delete_tenant),
        )
        .route("/v1/tenants/{name}/quarantine", post(quarantine))
        .route("/v1/tenants/{name}/release", post(release))
}

fn json(status: StatusCode, value: serde_json::Value) -> Response {
    (status, Json(value)).into_response()
}

fn error(status: StatusCode, message: impl Into<String>) -> Response {
    json(
        status,
        serde_json::json!({ "error": message.into(), "written": false }),
    )
}

fn etag(revision: u64) -> HeaderValue {
    // A decimal number in quotes is always a valid header value.
    HeaderValue::from_str(&format!("\"{revision}\"")).unwrap_or(HeaderValue::from_static("\"0\""))
}

/// `GET /v1/tenants`: every tenant document known, served or refused.
async fn list(State(state): State<AdminState>) -> Response {
    Json(state.reloader.tenants().list()).into_response()
}

/// `GET /v1/tenants/{name}`: one tenant's served version, serial and last refusal; `ETag`:
/// the store's revision of its document now (what `If-Match` compares).
async fn show(State(state): State<AdminState>, Path(name): Path<String>) -> Response {
    let Some(view) = state.reloader.tenants().get(&name) else {
        return (
            StatusCode::NOT_FOUND,
            format!("no tenant {name:?} (no document tenants/{name}.toml)\n"),
        )
            .into_response();
    };
    let revision = tokio::task::spawn_blocking(move || {
        let store = store_of(&state).ok()?;
        store.current(&tenant_key(&name)).ok().flatten()
    })
    .await
    .ok()
    .flatten()
    .map(|c| c.revision);
    let mut response = Json(view).into_response();
    if let Some(revision) = revision {
        response.headers_mut().insert(header::ETAG, etag(revision));
    }
    response
}

/// What `If-Match` asks: nothing (write whatever is there), `*` (the document must exist) or
/// one revision (`"123"`, `W/"123"` or `123`; `"0"`: the document must not exist yet).
enum Precondition {
    None,
    Exists,
    Revision(u64),
}

fn precondition(headers: &HeaderMap) -> Result<Precondition, Box<Response>> {
    let Some(value) = headers.get(header::IF_MATCH) else {
        return Ok(Precondition::None);
    };
    let text = value.to_str().unwrap_or("").trim();
    if text == "*" {
        return Ok(Precondition::Exists);
    }
    let bare = text.trim_start_matches("W/").trim_matches('"');
    bare.parse().map(Precondition::Revision).map_err(|_| {
        Box::new(error(
            StatusCode::BAD_REQUEST,
            format!("If-Match: {text:?} is not a revision (a number, as the ETag gives it)"),
        ))
    })
}

/// The revision the write compares against, given the document's revision now (0: absent).
fn expected(precondition: &Precondition, found: u64) -> Result<u64, Box<Response>> {
    let mismatch = |wanted: String| {
        Box::new(json(
            StatusCode::PRECONDITION_FAILED,
            serde_json::json!({
                "error": format!("If-Match {wanted}: the document is at revision {found}; nothing written"),
                "revision": found,
                "written": false,
            }),
        ))
    };
    match precondition {
        Precondition::None => Ok(found),
        Precondition::Exists if found == 0 => Err(mismatch("*".into())),
        Precondition::Exists => Ok(found),
        Precondition::Revision(r) if *r != found => Err(mismatch(format!("\"{r}\""))),
        Precondition::Revision(r) => Ok(*r),
    }
}

/// The document's TOML text from the request body, by its content type.
fn document_text(headers: &HeaderMap, body: &[u8]) -> Result<String, Box<Response>> {
    let bad = |status: StatusCode, message: String| Box::new(error(status, message));
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    match content_type.as_str() {
        "application/json" => {
            let value: serde_json::Value = serde_json::from_slice(body).map_err(|e| {
                bad(
                    StatusCode::BAD_REQUEST,
                    format!(
                        "body: not JSON: {e} (line {}, column {})",
                        e.line(),
                        e.column()
                    ),
                )
            })?;
            if !value.is_object() {
                return Err(bad(
                    StatusCode::BAD_REQUEST,
                    "body: a tenant document is a JSON object (names, ttl, profile, …)".into(),
                ));
            }
            toml::to_string(&value).map_err(|e| {
                bad(
                    StatusCode::BAD_REQUEST,
                    format!("body: cannot be a tenant document: {e} (null is not a value)"),
                )
            })
        }
        "" | "application/toml" | "text/toml" | "text/x-toml" | "text/plain" => {
            String::from_utf8(body.to_vec()).map_err(|e| {
                bad(
                    StatusCode::BAD_REQUEST,
                    format!("body: not UTF-8 text: {e}"),
                )
            })
        }
        other => Err(bad(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            format!("Content-Type {other:?}: send application/toml or application/json"),
        )),
    }
}

/// The store the config names: the tenants folder on a single node; in a fleet, etcd's
/// tenant keys (mirrored into this node's folder, see `crate::fleet::tenants`).
fn store_of(state: &AdminState) -> Result<Box<dyn ControlStore>, Box<Response>> {
    Ok(stores_of(state)?.0)
}

/// [`store_of`], and whether the fleet stages tenant changes (`[fleet.rollout]` with waves):
/// then a write is not served here first.
fn stores_of(state: &AdminState) -> Result<(Box<dyn ControlStore>, bool), Box<Response>> {
    let config = state
        .reloader
        .source()
        .read_config()
        .map_err(|e| Box::new(error(StatusCode::CONFLICT, e.to_string())))?;
    tenant_stores(&config).map_err(|e| match e {
        TenantStoreError::Config(e) => Box::new(error(StatusCode::CONFLICT, e.to_string())),
        TenantStoreError::Store(e) => Box::new(store_error(e)),
    })
}

/// Why the tenants' store could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum TenantStoreError {
    #[error(transparent)]
    Config(crate::change::ChangeError),
    #[error(transparent)]
    Store(StoreError),
}

/// The store tenant documents are written to for `config`: the tenants folder on a single
/// node; in a fleet, etcd's tenant keys (mirrored into this node's folder, see
/// `crate::fleet::tenants`). The bool: whether the fleet stages tenant changes
/// (`[fleet.rollout]` with waves), so that a write is not served here first.
pub fn tenant_stores(config: &Config) -> Result<(Box<dyn ControlStore>, bool), TenantStoreError> {
    let local = crate::change::file_store(config).map_err(TenantStoreError::Config)?;
    let Some(fleet) = &config.fleet else {
        return Ok((Box::new(local), false));
    };
    let keep = fleet.history_keep.unwrap_or(config.control.history_keep);
    let etcd = crate::fleet::control_store::EtcdStore::connect(fleet, keep)
        .map_err(TenantStoreError::Store)?
        .with_tenants(local, config.tenants.dir.clone());
    let staged = fleet.rollout.as_ref().is_some_and(|p| !p.waves.is_empty());
    if staged {
        return Ok((Box::new(etcd.staged()), true));
    }
    Ok((Box::new(etcd), false))
}

fn store_error(e: StoreError) -> Response {
    match e {
        StoreError::Conflict { found, .. } => json(
            StatusCode::PRECONDITION_FAILED,
            serde_json::json!({ "error": e.to_string(), "revision": found, "written": false }),
        ),
        StoreError::Missing { .. } => error(StatusCode::NOT_FOUND, e.to_string()),
        other => error(StatusCode::INTERNAL_SERVER_ERROR, other.to_string()),
    }
}

fn put_error(e: PutError<StoreError>) -> Response {
    match e {
        PutError::Off => error(StatusCode::CONFLICT, e.to_string()),
        PutError::Invalid(problems) => json(
            StatusCode::UNPROCESSABLE_ENTITY,
            serde_json::json!({
                "error": problems.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "),
                "problems": problems,
                "written": false,
            }),
        ),
        PutError::Refused(reasons) => json(
            StatusCode::UNPROCESSABLE_ENTITY,
            serde_json::json!({ "error": reasons.join("; "), "reasons": reasons, "written": false }),
        ),
        PutError::Store(e) => store_error(e),
    }
}

fn check_name(name: &str) -> Result<(), Box<Response>> {
    if valid_tenant_name(name) {
        return Ok(());
    }
    Err(Box::new(error(
        StatusCode::BAD_REQUEST,
        format!("{name:?} is not a tenant name (1 to 63 lower-case letters, digits or '-')"),
    )))
}

/// The response of a blocking handler body (or why the task failed).
fn finished(outcome: Result<Result<Response, Box<Response>>, tokio::task::JoinError>) -> Response {
    match outcome {
        Ok(Ok(response)) => response,
        Ok(Err(response)) => *response,
        Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    }
}

/// `PUT /v1/tenants/{name}`: check and taste the document, write it (compare-and-swap with
/// `If-Match`), serve it; 201 when the tenant is new, 200 otherwise.
async fn put_tenant(
    State(state): State<AdminState>,
    Path(name): Path<String>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    let outcome = tokio::task::spawn_blocking(move || {
        check_name(&name)?;
        let precondition = precondition(&headers)?;
        let text = document_text(&headers, &body)?;
        let (store, staged) = stores_of(&state)?;
        let key = tenant_key(&name);
        // A stale If-Match is refused before the taste; the write compares again.
        let found = store
            .current(&key)
            .map_err(|e| Box::new(store_error(e)))?
            .map_or(0, |c| c.revision);
        let expected = expected(&precondition, found)?;
        write_tenant(&state, store.as_ref(), staged, &name, expected, &text)
    })
    .await;
    finished(outcome)
}

/// `POST /v1/tenants/{name}/quarantine` and `/release`: the tenant's document with its
/// `state` set to `quarantined` (removed, on release: active), written and served as any
/// tenant change (history, taste, staged rollout), compare-and-swap on the revision read.
async fn set_state(state: AdminState, name: String, to: TenantState) -> Response {
    let outcome = tokio::task::spawn_blocking(move || {
        check_name(&name)?;
        let (store, staged) = stores_of(&state)?;
        let key = tenant_key(&name);
        let current = store
            .current(&key)
            .map_err(|e| Box::new(store_error(e)))?
            .ok_or_else(|| {
                Box::new(error(
                    StatusCode::NOT_FOUND,
                    format!("no tenant {name:?} (no document tenants/{name}.toml)"),
                ))
            })?;
        let text = crate::tenant::edit::set_state(&current.text, to)
            .map_err(|e| Box::new(error(StatusCode::CONFLICT, e.to_string())))?;
        write_tenant(
            &state,
            store.as_ref(),
            staged,
            &name,
            current.revision,
            &text,
        )
    })
    .await;
    finished(outcome)
}

async fn quarantine(State(state): State<AdminState>, Path(name): Path<String>) -> Response {
    set_state(state, name, TenantState::Quarantined).await
}

async fn release(State(state): State<AdminState>, Path(name): Path<String>) -> Response {
    set_state(state, name, TenantState::Active).await
}

/// Checks, tastes, writes (compare-and-swap on `expected`, 0: must not exist) and serves
/// (or, `staged`, leaves to the rollout) tenant `name`'s document `text`.
fn write_tenant(
    state: &AdminState,
    store: &dyn ControlStore,
    staged: bool,
    name: &str,
    expected: u64,
    text: &str,
) -> Result<Response, Box<Response>> {
    let key = tenant_key(name);
    let author = crate::control::store::Author {
        source: "admin API".into(),
        ..Default::default()
    };
    let registry = state.reloader.tenants();
    let write = || store.compare_and_write(&key, expected, text, &author);
    let outcome = match staged {
        true => registry.put_staged(name, text, write),
        false => registry.put(name, text, write),
    };
    let (written, view) = outcome.map_err(|e| Box::new(put_error(e)))?;
    let status = if staged {
        StatusCode::ACCEPTED
    } else if expected == 0 {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    let mut response = json(
        status,
        serde_json::json!({
            "written": true,
            "staged": staged,
            "revision": written.revision,
            "tenant": view,
        }),
    );
    response
        .headers_mut()
        .insert(header::ETAG, etag(written.revision));
    Ok(response)
}

/// `DELETE /v1/tenants/{name}`: remove the document (compare-and-swap with `If-Match`); its
/// names answer as the platform's at once; its history stays.
async fn delete_tenant(
    State(state): State<AdminState>,
    Path(name): Path<String>,
    headers: HeaderMap,
) -> Response {
    let outcome = tokio::task::spawn_blocking(move || {
        check_name(&name)?;
        let precondition = precondition(&headers)?;
        let (store, staged) = stores_of(&state)?;
        let key = tenant_key(&name);
        let found = match store.current(&key) {
            Ok(Some(current)) => current.revision,
            Ok(None) => {
                return Err(Box::new(error(
                    StatusCode::NOT_FOUND,
                    format!("no tenant document {key}"),
                )))
            }
            Err(e) => return Err(Box::new(store_error(e))),
        };
        let expected = expected(&precondition, found)?;
        let remove = || store.compare_and_delete(&key, expected);
        if staged {
            // Staged: the canary, then every other node, apply the removal from etcd.
            remove().map_err(|e| Box::new(store_error(e)))?;
        } else {
            state
                .reloader
                .tenants()
                .delete(&name, remove)
                .map_err(|e| Box::new(put_error(e)))?;
        }
        Ok(json(
            StatusCode::OK,
            serde_json::json!({ "deleted": true, "revision": expected }),
        ))
    })
    .await;
    finished(outcome)
}
