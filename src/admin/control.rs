//! The admin API's control writes (token required, like every write): `POST /v1/control`
//! replaces the control file and `POST /v1/control/edit` applies one edit (a
//! [`crate::control::edit::Edit`]: weights, a drain, a gate) to it, both through the same path
//! as the CLI (`crate::change::edit_file`: safety rules with overrides, serial, taste against
//! the snapshot served so unchanged zones are shared, compare-before-replace), then serve it;
//! the CLI sends its edits here when the server answers, so a break-glass flip is not a whole
//! load in the CLI followed by another in the server;
//! `POST /v1/safety/check` evaluates a candidate without writing; `POST /v1/safety/refusals`
//! is how the CLI reports a refusal it made, so that this server counts it by rule.

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use serde::Deserialize;

use super::AdminState;
use crate::change::{edit_file, screen, ChangeError, OverrideRequest};
use crate::config::Config;
use crate::control::edit::{Edit, EditError};
use crate::safety::tally;

pub fn routes() -> Router<AdminState> {
    Router::new()
        .route("/v1/control", post(write_control))
        .route("/v1/control/edit", post(write_edit))
        .route("/v1/safety/check", post(check))
        .route("/v1/safety/refusals", post(refusals))
}

/// The body of `POST /v1/control` and `POST /v1/safety/check`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ControlRequest {
    /// The whole candidate control text.
    pub text: String,
    /// Safety rules to let the change through despite, each with its reason.
    #[serde(default)]
    pub overrides: Vec<OverrideRequest>,
    /// Who asks (recorded with overrides); the token is the fleet's, so this is the caller's
    /// own word: recorded as "<by> via admin API".
    #[serde(default)]
    pub by: Option<String>,
}

impl ControlRequest {
    fn by(&self) -> String {
        let who = self.by.as_deref().map(str::trim).filter(|b| !b.is_empty());
        format!("{} via admin API", who.unwrap_or("someone"))
    }
}

fn parse_request(body: &[u8]) -> Result<ControlRequest, Box<Response>> {
    serde_json::from_slice(body).map_err(|e| {
        Box::new(json(
            StatusCode::BAD_REQUEST,
            serde_json::json!({ "error": e.to_string() }),
        ))
    })
}

fn json(status: StatusCode, value: serde_json::Value) -> Response {
    (status, Json(value)).into_response()
}

fn config_of(state: &AdminState) -> Result<Config, Box<Response>> {
    let config = state.reloader.source().read_config().map_err(|e| {
        Box::new(json(
            StatusCode::CONFLICT,
            serde_json::json!({ "error": e.to_string() }),
        ))
    })?;
    tally::configure(&config.safety);
    Ok(config)
}

/// The response of a blocking handler body (or why the task failed).
fn finished(outcome: Result<Result<Response, Box<Response>>, tokio::task::JoinError>) -> Response {
    match outcome {
        Ok(Ok(response)) => response,
        Ok(Err(response)) => *response,
        Err(e) => json(
            StatusCode::INTERNAL_SERVER_ERROR,
            serde_json::json!({ "error": e.to_string() }),
        ),
    }
}

/// A refusal as JSON (and counted).
fn refused(error: ChangeError) -> Box<Response> {
    Box::new(refusal_response(error))
}

fn refusal_response(error: ChangeError) -> Response {
    match error {
        ChangeError::Refused(violations) => {
            tally::count_refusal(
                violations
                    .iter()
                    .filter(|v| !v.overridden)
                    .map(|v| v.rule.as_str()),
            );
            json(
                StatusCode::CONFLICT,
                serde_json::json!({ "refused_by": violations, "written": false }),
            )
        }
        ChangeError::Invalid(problems) => json(
            StatusCode::UNPROCESSABLE_ENTITY,
            serde_json::json!({ "refused": problems, "written": false }),
        ),
        ChangeError::BadOverride(problem) => json(
            StatusCode::BAD_REQUEST,
            serde_json::json!({ "error": problem, "written": false }),
        ),
        other => json(
            StatusCode::CONFLICT,
            serde_json::json!({ "error": other.to_string(), "written": false }),
        ),
    }
}

/// The body of `POST /v1/control/edit`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EditRequest {
    pub edit: Edit,
    #[serde(default)]
    pub overrides: Vec<OverrideRequest>,
    /// Who asks, as in [`ControlRequest`].
    #[serde(default)]
    pub by: Option<String>,
}

/// `POST /v1/control`: replace the control file (single node; a fleet writes through etcd).
async fn write_control(State(state): State<AdminState>, body: axum::body::Bytes) -> Response {
    let request = match parse_request(&body) {
        Ok(r) => r,
        Err(response) => return *response,
    };
    let by = request.by();
    write(state, request.overrides, by, move |_| {
        Ok(request.text.clone())
    })
    .await
}

/// `POST /v1/control/edit`: apply one edit to the control file as it is now.
async fn write_edit(State(state): State<AdminState>, body: axum::body::Bytes) -> Response {
    let request: EditRequest = match serde_json::from_slice(&body) {
        Ok(r) => r,
        Err(e) => {
            return json(
                StatusCode::BAD_REQUEST,
                serde_json::json!({ "error": format!("bad request body: {e}"), "written": false }),
            )
        }
    };
    let who = request
        .by
        .as_deref()
        .map(str::trim)
        .filter(|b| !b.is_empty());
    let by = format!("{} via admin API", who.unwrap_or("someone"));
    let edit = request.edit;
    write(state, request.overrides, by, move |text| edit.apply(text)).await
}

/// One write through [`edit_file`], tasted against the snapshot served, then served.
async fn write(
    state: AdminState,
    overrides: Vec<OverrideRequest>,
    by: String,
    edit: impl Fn(&str) -> Result<String, EditError> + Send + 'static,
) -> Response {
    let outcome = tokio::task::spawn_blocking(move || {
        let config = config_of(&state)?;
        if config.fleet.is_some() {
            return Err(Box::new(json(
                StatusCode::CONFLICT,
                serde_json::json!({ "error": "fleet mode: the control state is in etcd; change it with the CLI (weight set, drain, control rollback)", "written": false }),
            )));
        }
        let (served, status) = state.reloader.snapshot_and_status();
        let floor = crate::change::recorded_floor(&config).max(status.serial);
        let written = edit_file(
            &config,
            floor,
            Some(served.compiled()),
            &overrides,
            &by,
            edit,
        )
        .map_err(refused)?;
        drop(served);
        tally::count_override(written.overridden.iter().map(|v| v.rule.as_str()));
        let served = match state.reloader.reload_if_control_changed() {
            Some(Err(reasons)) => serde_json::json!({ "refused": reasons }),
            Some(Ok(_)) | None => serde_json::json!(state.reloader.status().serial),
        };
        Ok(json(
            StatusCode::OK,
            serde_json::json!({
                "written": true,
                "path": written.path,
                "text": written.text,
                "summary": written.summary,
                "overridden": written.overridden,
                "unused_overrides": written.unused,
                "serving_serial": served,
            }),
        ))
    })
    .await;
    finished(outcome)
}

/// `POST /v1/safety/check`: the safety rules on a candidate against the control file now and
/// its history; writes nothing (a refusal here is not counted: nothing was attempted).
async fn check(State(state): State<AdminState>, body: axum::body::Bytes) -> Response {
    let request = match parse_request(&body) {
        Ok(r) => r,
        Err(response) => return *response,
    };
    let outcome = tokio::task::spawn_blocking(move || {
        let config = config_of(&state)?;
        let current = config
            .control
            .file
            .as_ref()
            .and_then(|p| crate::files::read_text_limited(p, crate::files::SMALL_FILE_LIMIT).ok())
            .unwrap_or_default();
        let recent = crate::change::history(&config)
            .map(|h| crate::safety::recent_from_history(&h, crate::safety::RECENT_VERSIONS))
            .unwrap_or_default();
        Ok::<_, Box<Response>>(
            match screen(
                &config,
                &current,
                &request.text,
                &recent,
                &request.overrides,
                &request.by(),
            ) {
                Ok(screened) => json(
                    StatusCode::OK,
                    serde_json::json!({ "passes": true, "overridden": screened.overridden }),
                ),
                Err(ChangeError::Refused(violations)) => json(
                    StatusCode::OK,
                    serde_json::json!({ "passes": false, "violations": violations }),
                ),
                Err(e) => json(
                    StatusCode::BAD_REQUEST,
                    serde_json::json!({ "error": e.to_string() }),
                ),
            },
        )
    })
    .await;
    finished(outcome)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RefusalReport {
    rules: Vec<String>,
}

/// `POST /v1/safety/refusals`: the CLI refused a change by these rules.
async fn refusals(body: axum::body::Bytes) -> Response {
    match serde_json::from_slice::<RefusalReport>(&body) {
        Ok(report) if !report.rules.is_empty() => {
            tally::count_refusal(report.rules.iter().map(String::as_str));
            json(
                StatusCode::OK,
                serde_json::json!({ "counted": report.rules.len() }),
            )
        }
        Ok(_) => json(
            StatusCode::BAD_REQUEST,
            serde_json::json!({ "error": "no rules" }),
        ),
        Err(e) => json(
            StatusCode::BAD_REQUEST,
            serde_json::json!({ "error": e.to_string() }),
        ),
    }
}
