//! The admin API's break-glass routes for a fleet node (`crate::fleet::direct` does the
//! work): `GET /v1/fleet/direct` (what the node serves, its override and the registry it last
//! saw: what `--direct` builds on), `POST /v1/fleet/override` (token required: screen, taste
//! and serve a version as the local override) and `POST /v1/fleet/override/drop` (token
//! required: serve the fleet's version again).

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};

use super::AdminState;
use crate::fleet::direct::{self, DirectRefusal, DirectRequest};

pub fn routes() -> Router<AdminState> {
    Router::new()
        .route("/v1/fleet/direct", get(view))
        .route("/v1/fleet/override", post(serve))
        .route("/v1/fleet/override/drop", post(drop_override))
}

fn json(status: StatusCode, value: serde_json::Value) -> Response {
    (status, Json(value)).into_response()
}

fn not_a_fleet() -> Response {
    json(
        StatusCode::CONFLICT,
        serde_json::json!({ "error": "not a fleet node (no [fleet] in its config): change its control file with the CLI or POST /v1/control", "served": false }),
    )
}

async fn view(State(state): State<AdminState>) -> Response {
    let Some(origin) = &state.fleet else {
        return not_a_fleet();
    };
    Json(direct::view(&state.reloader, origin)).into_response()
}

async fn serve(State(state): State<AdminState>, body: axum::body::Bytes) -> Response {
    let Some(origin) = state.fleet.clone() else {
        return not_a_fleet();
    };
    let request: DirectRequest = match serde_json::from_slice(&body) {
        Ok(r) => r,
        Err(e) => {
            return json(
                StatusCode::BAD_REQUEST,
                serde_json::json!({ "error": e.to_string(), "served": false }),
            )
        }
    };
    let reloader = state.reloader.clone();
    let outcome =
        tokio::task::spawn_blocking(move || direct::serve(&reloader, &origin, request)).await;
    match outcome {
        Ok(Ok(serial)) => json(
            StatusCode::OK,
            serde_json::json!({ "served": true, "serial": serial }),
        ),
        Ok(Err(refusal)) => {
            let status = match refusal {
                DirectRefusal::Safety(_) => StatusCode::CONFLICT,
                DirectRefusal::Invalid(_) => StatusCode::UNPROCESSABLE_ENTITY,
                DirectRefusal::Bad(_) => StatusCode::BAD_REQUEST,
            };
            json(
                status,
                serde_json::json!({ "served": false, "refused": refusal.to_string() }),
            )
        }
        Err(e) => json(
            StatusCode::INTERNAL_SERVER_ERROR,
            serde_json::json!({ "served": false, "error": e.to_string() }),
        ),
    }
}

async fn drop_override(State(state): State<AdminState>, _body: axum::body::Bytes) -> Response {
    let Some(origin) = state.fleet.clone() else {
        return not_a_fleet();
    };
    let reloader = state.reloader.clone();
    let outcome =
        tokio::task::spawn_blocking(move || direct::drop_override(&reloader, &origin)).await;
    match outcome {
        Ok(Ok(serial)) => json(
            StatusCode::OK,
            serde_json::json!({ "dropped": serial.is_some(), "serial": reloader_serial(&state) }),
        ),
        Ok(Err(e)) => json(
            StatusCode::UNPROCESSABLE_ENTITY,
            serde_json::json!({ "dropped": true, "refused": e, "serial": reloader_serial(&state) }),
        ),
        Err(e) => json(
            StatusCode::INTERNAL_SERVER_ERROR,
            serde_json::json!({ "error": e.to_string() }),
        ),
    }
}

fn reloader_serial(state: &AdminState) -> u64 {
    state.reloader.status().serial
}
