//! The admin endpoint: the effective configuration with its provenance, run-time property
//! changes, and the manual override of circuit breakers.
//!
//! Off unless the builder enables it ([`DashboardBuilder::admin`](crate::DashboardBuilder::admin)
//! or [`admin_token`](crate::DashboardBuilder::admin_token)). Routes (JSON answers):
//!
//! | method and path | what |
//! |---|---|
//! | `GET /hystrix/admin/config/commands/{key}` | every command property of `key`: value, layer, source, hidden values |
//! | `GET /hystrix/admin/config/threadpools/{key}` | the same for a thread pool |
//! | `GET /hystrix/admin/config/collapsers/{key}` | the same for a collapser |
//! | `GET /hystrix/admin/config/properties/{full name}` | one property |
//! | `PUT /hystrix/admin/config/properties/{full name}` | sets it at run time; the body is the value as text (`250`, `true`, `THREAD`) |
//! | `DELETE /hystrix/admin/config/properties/{full name}` | removes the run-time value (a file or environment value shows through again) |
//! | `GET /hystrix/admin/circuit/{command}` | the breaker's status, and the sticky overrides |
//! | `POST /hystrix/admin/circuit/{command}/force-open` | trips it now: OPEN for a new sleep window, then trials as usual |
//! | `POST /hystrix/admin/circuit/{command}/force-close` | closes it now with zeroed health counts (failures may trip it again) |
//! | `POST /hystrix/admin/circuit/{command}/reset` | closes it, restarts its health counts and forgets why it last opened |
//!
//! The three POSTs are one-time actions on the breaker. To hold a breaker
//! open or closed until told otherwise, as Hystrix's operators do, PUT the sticky properties
//! `hystrix.command.<Key>.circuitBreaker.forceOpen` (or `forceClosed`) to `true`, and DELETE
//! them to let go; `GET .../circuit/{command}` shows both as `forcedOpen` / `forcedClosed`.
//!
//! Chaos injection is turned on and off the same way: with the rates set (e.g. PUT
//! `hystrix.command.<Key>.chaos.fault.ratePercentage` to `10`), PUT
//! `hystrix.command.<Key>.chaos.enabled` to `true` and the command's next attempts are
//! injected into; PUT it to `false`, or DELETE it, to stop. Each change is logged and told to
//! the callback as any other. Only a registry built with `RegistryBuilder::allow_chaos(true)`
//! accepts `true`; elsewhere the PUT answers 400 with an error naming the property, and
//! nothing changes.
//!
//! A property report (`GET`/`PUT`/`DELETE` of a property, and each entry of a key's list) is
//! `{"name", "value", "layer", "origin", "source", "dynamic", "keyInUse", "pending",
//! "overridden"}`: the effective value; its layer (`"code default"`, `"global default"`,
//! `"builder"`, `"per key"`); where it was written, as `origin` (`{"kind": "code" | "file" |
//! "environment" | "section" | "runtime", "path", "line", "variable", "name"}`, `name` being a
//! settings section's) and as one line of text
//! (`source`); whether a change applies to keys in use at their next execution (`dynamic`;
//! the stream properties are read once, when a dashboard is built, so a change shows here but
//! not in running streams); whether the key has live state (`keyInUse`; for a key not in use
//! the values are what a new key would get); for a fixed property of a key in use, the value
//! it would take once re-created (`pending`, else `null`); and the lower values it hides,
//! highest first (`overridden`, each `{"value", "layer", "origin", "source"}`).
//!
//! A run-time value ranks above the file and the environment within its layer
//! and survives a reload of the file. A refused change answers 400 (invalid value, not
//! UTF-8, or a body that could not be read: malformed chunks, the request-read timeout), 404
//! (unknown property; unknown command for the circuit routes), 409 (a fixed property of a key
//! in use) or 413 (a value over 1024 bytes) with `{"error": "<message>"}` (naming the property
//! where there is one), and changes nothing. At most 1024 bytes of a body are read: a
//! `Content-Length` over it is answered 413 at once, unread (the connection is then closed,
//! unless the body came whole with the head), and a longer chunked body as soon as its 1025th
//! byte arrives.
//!
//! **Access.** With a bearer token ([`admin_token`](crate::DashboardBuilder::admin_token)),
//! every admin request needs `Authorization: Bearer <token>` (the scheme in any case, the
//! token compared in constant time), from any peer; a missing or wrong token answers 401. Use
//! a token whenever anything but you can reach the host's loopback interface: a reverse proxy
//! or a sidecar on the host, other users' processes. Without one
//! ([`admin`](crate::DashboardBuilder::admin)), only direct loopback clients are served (403
//! otherwise): the peer address must be loopback (IPv4, IPv6 or IPv4-mapped), the request must
//! carry no proxy header (`Forwarded`, any `X-Forwarded-*`, `X-Real-IP`), its `Host` (or an
//! absolute request target) must name a loopback host (against DNS rebinding), and an `Origin`
//! header, if any, must be a loopback one (a web page elsewhere cannot post to it). A loopback
//! host is exactly `localhost`, `127.x.y.z` or a bracketed IPv6 loopback address such as
//! `[::1]`, followed by nothing or `:<port>` (`localhost:evil.com`, `[::1]evil.com` and
//! `user@localhost` are not); an origin is `http://` or `https://` and such a host, nothing
//! after; a second `Host` or `Origin` header is refused. An HTTP/1.1 request with neither a
//! `Host` header nor an absolute target is malformed and answers 400 (RFC 9112 3.2); an
//! HTTP/1.0 client may leave the host out. So a router merged into an app that
//! listens on every interface is not reachable from the network: the peer address comes from
//! axum's `ConnectInfo<SocketAddr>`, which [`Dashboard::serve`](crate::Dashboard::serve)
//! provides; an app that serves the router itself must use
//! `into_make_service_with_connect_info::<SocketAddr>()`, or every admin request is refused
//! with a 403 that says so (and give its server the limits `Dashboard::serve` has: see the
//! crate's "Embedding").
//!
//! Every change is logged (`tracing`, INFO, target `hystrix::admin`, names and values escaped
//! so one change is one line) and told to the callback of
//! [`on_admin_change`](crate::DashboardBuilder::on_admin_change), if any (a panic in it is
//! caught and logged; the change stands and is answered).

use std::borrow::Cow;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{ConnectInfo, Extension, Path, Request, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode, Version, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use http_body::Body as _;
use http_body_util::{BodyExt, LengthLimitError, Limited};
use hystrix::config::{
    COLLAPSER_PROPERTIES, COMMAND_PROPERTIES, LayerValue, Origin, PropertyInfo, PropertyReport,
    PropertyValue, THREAD_POOL_PROPERTIES,
};
use hystrix::{ConfigError, Registry};
use serde::Serialize;
use serde_json::{Value, json};
use subtle::ConstantTimeEq;

/// Who may use the admin routes.
#[derive(Clone)]
pub(crate) enum Access {
    /// Peers on a loopback address only.
    Loopback,
    /// Any peer with this bearer token.
    Token(Arc<str>),
}

impl fmt::Debug for Access {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Access::Loopback => f.write_str("Loopback"),
            Access::Token(_) => f.write_str("Token(<redacted>)"),
        }
    }
}

/// The largest value a PUT accepts, in bytes (no property needs more), and the most of its body
/// that is read.
const MAX_VALUE_BYTES: usize = 1024;

/// A token [`admin_token`](crate::DashboardBuilder::admin_token) refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid admin token: {reason}")]
pub struct AdminTokenError {
    reason: &'static str,
}

/// Checks a bearer token: at least 16 visible ASCII characters (RFC 6750 `b64token`-like,
/// no spaces), so that a typo like an empty string never opens the admin routes.
pub(crate) fn check_token(token: &str) -> Result<(), AdminTokenError> {
    if token.len() < 16 {
        return Err(AdminTokenError {
            reason: "must be at least 16 characters",
        });
    }
    if !token.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(AdminTokenError {
            reason: "must be visible ASCII characters without spaces",
        });
    }
    Ok(())
}

/// A change made through the admin routes.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct AdminChange {
    /// The peer that asked, when the server provides it.
    pub peer: Option<SocketAddr>,
    /// What changed.
    pub action: AdminAction,
}

impl AdminChange {
    /// A change: `action`, asked by `peer`.
    pub fn new(peer: Option<SocketAddr>, action: AdminAction) -> Self {
        AdminChange { peer, action }
    }
}

/// What an admin request changed.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum AdminAction {
    /// A property was set at run time to `value` (as given).
    PropertySet {
        /// The full property name.
        name: String,
        /// The value, as text.
        value: String,
    },
    /// A property's run-time value was removed.
    PropertyUnset {
        /// The full property name.
        name: String,
    },
    /// A command's breaker was tripped by hand.
    ForceOpen {
        /// The command key.
        command: String,
    },
    /// A command's breaker was closed by hand.
    ForceClose {
        /// The command key.
        command: String,
    },
    /// A command's manual override was cleared.
    Reset {
        /// The command key.
        command: String,
    },
}

impl fmt::Display for AdminAction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            // Escaped: one change is one log line, whatever its text holds.
            AdminAction::PropertySet { name, value } => {
                write!(f, "set {} = {}", name.escape_debug(), value.escape_debug())
            }
            AdminAction::PropertyUnset { name } => write!(f, "unset {}", name.escape_debug()),
            AdminAction::ForceOpen { command } => write!(f, "force-open {command}"),
            AdminAction::ForceClose { command } => write!(f, "force-close {command}"),
            AdminAction::Reset { command } => write!(f, "reset {command}"),
        }
    }
}

/// The callback told of each admin change.
#[derive(Clone)]
pub(crate) struct OnChange(pub(crate) Arc<dyn Fn(&AdminChange) + Send + Sync>);

impl fmt::Debug for OnChange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("OnChange")
    }
}

/// What the admin routes share.
#[derive(Debug)]
pub(crate) struct Admin {
    pub(crate) registry: Registry,
    pub(crate) access: Access,
    pub(crate) on_change: Option<OnChange>,
}

impl Admin {
    fn changed(&self, peer: Option<SocketAddr>, action: AdminAction) {
        match peer {
            Some(peer) => {
                tracing::info!(target: "hystrix::admin", %peer, "hystrix admin: {action}")
            }
            None => tracing::info!(target: "hystrix::admin", "hystrix admin: {action}"),
        }
        if let Some(OnChange(on_change)) = &self.on_change {
            let change = AdminChange { peer, action };
            // The change is made: a panicking callback must not turn it into a failed answer.
            if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| on_change(&change)))
                .is_err()
            {
                tracing::error!(
                    target: "hystrix::admin",
                    "hystrix admin: the on_admin_change callback panicked ({})",
                    change.action
                );
            }
        }
    }
}

/// The admin routes, behind the access check.
pub(crate) fn routes<S>(admin: Arc<Admin>) -> Router<S>
where
    S: Clone + Send + Sync + 'static,
{
    Router::new()
        .route("/hystrix/admin/config/commands/{key}", get(command_config))
        .route("/hystrix/admin/config/threadpools/{key}", get(pool_config))
        .route(
            "/hystrix/admin/config/collapsers/{key}",
            get(collapser_config),
        )
        .route(
            "/hystrix/admin/config/properties/{name}",
            get(property).put(set_property).delete(unset_property),
        )
        .route("/hystrix/admin/circuit/{command}", get(circuit))
        .route(
            "/hystrix/admin/circuit/{command}/{action}",
            post(override_circuit),
        )
        .route_layer(middleware::from_fn_with_state(
            Arc::clone(&admin),
            check_access,
        ))
        .with_state(admin)
}

/// The token of an `Authorization: Bearer <token>` value (the scheme in any case, RFC 7235).
fn bearer_token(value: &str) -> Option<&str> {
    let (scheme, token) = value.split_once(' ')?;
    scheme.eq_ignore_ascii_case("Bearer").then_some(token)
}

/// Whether `name` is a header a proxy adds (`Forwarded`, any `X-Forwarded-*`, `X-Real-IP`): a
/// request that carries one did not come straight from a loopback client, whatever the peer
/// address says.
fn is_proxy_header(name: &HeaderName) -> bool {
    let name = name.as_str(); // lower case
    name == "forwarded" || name == "x-real-ip" || name.starts_with("x-forwarded-")
}

/// An HTTP/1.1 request must name its host: a `Host` header, or an absolute request target
/// (RFC 9112 3.2: a server answers 400 to one with neither). HTTP/1.0 clients may omit it;
/// HTTP/2 names it in `:authority`, which becomes the target's authority. Checked where the
/// host decides access (no token); with a token, the token does.
fn missing_host(request: &Request) -> Option<&'static str> {
    (request.version() == Version::HTTP_11
        && request.uri().authority().is_none()
        && !request.headers().contains_key(header::HOST))
    .then_some("an HTTP/1.1 request must carry a `Host` header (RFC 9112 3.2)")
}

/// Without a token, a loopback peer is trusted only if the request is local all the way: a
/// proxy on the host (it adds `Forwarded` / `X-Forwarded-*` / `X-Real-IP`) would make every
/// network client loopback, and a web page in a browser on the host could post to loopback
/// (a foreign `Origin`) or reach it through DNS rebinding (a `Host` that is not loopback).
/// `Host` and `Origin` are parsed strictly ([`is_loopback_authority`]) and must not repeat:
/// with two of them, which one a check reads and which one a proxy or browser meant differ.
fn not_local(request: &Request) -> Option<String> {
    let headers = request.headers();
    if let Some(forwarded) = headers.keys().find(|name| is_proxy_header(name)) {
        return Some(format!(
            "the admin routes without a token answer only direct loopback clients; this \
             request came through a proxy (`{forwarded}`): configure an admin token"
        ));
    }
    let host = match single(headers, &header::HOST) {
        Err(refusal) => return Some(refusal),
        Ok(host) => host.map(text),
    };
    // An absolute request target names the host too (RFC 9112 3.2.2: a server goes by it
    // rather than by `Host`): both must be loopback. No `Host` at all is an HTTP/1.0 client
    // (`missing_host` refused HTTP/1.1 ones), not a browser (browsers always send it).
    let target = request
        .uri()
        .authority()
        .map(|authority| authority.as_str().into());
    if let Some(host) = [target, host]
        .into_iter()
        .flatten()
        .find(|host| !is_loopback_authority(host))
    {
        return Some(format!(
            "the admin routes without a token answer only requests for a loopback host (this \
             one: `{}`): configure an admin token",
            host.escape_debug()
        ));
    }
    match single(headers, &header::ORIGIN) {
        Err(refusal) => Some(refusal),
        Ok(Some(origin)) if !is_loopback_origin(origin.as_bytes()) => Some(format!(
            "the admin routes without a token refuse requests from web pages of other origins \
             (this one: `{}`)",
            text(origin).escape_debug()
        )),
        Ok(_) => None,
    }
}

/// The value of a header that may appear at most once (`Ok(None)`: absent).
fn single<'a>(
    headers: &'a HeaderMap,
    name: &HeaderName,
) -> Result<Option<&'a HeaderValue>, String> {
    let mut values = headers.get_all(name).iter();
    let first = values.next();
    if values.next().is_some() {
        return Err(format!(
            "the admin routes without a token refuse a request with more than one `{name}` header"
        ));
    }
    Ok(first)
}

/// A header value as text (invalid UTF-8 replaced, so it never matches a loopback host).
fn text(value: &HeaderValue) -> Cow<'_, str> {
    String::from_utf8_lossy(value.as_bytes())
}

/// Whether `origin` is a web origin on a loopback host: `http://` or `https://` (scheme in any
/// case), then [`is_loopback_authority`], then nothing (RFC 6454: no path, no user info).
fn is_loopback_origin(origin: &[u8]) -> bool {
    let Ok(origin) = std::str::from_utf8(origin) else {
        return false;
    };
    let Some((scheme, authority)) = origin.split_once("://") else {
        return false;
    };
    (scheme.eq_ignore_ascii_case("http") || scheme.eq_ignore_ascii_case("https"))
        && is_loopback_authority(authority)
}

/// Whether `authority` is exactly a loopback host, then nothing or `:<port>` (decimal digits
/// naming a u16): `localhost` (any case), an IPv4 loopback address (`127.x.y.z`, dotted quad),
/// or an IPv6 loopback address in brackets (`[::1]`, also written out or IPv4-mapped). No user
/// info, no trailing dot or name, no empty port: `localhost:evil.com`, `[::1]evil.com`,
/// `user@localhost` and `127.0.0.1.evil.com` are not loopback. (The `http` crate's
/// `Authority` accepts the first two, so it is not used here.)
fn is_loopback_authority(authority: &str) -> bool {
    let (is_loopback, rest) = match authority.strip_prefix('[') {
        Some(bracketed) => {
            let Some((ip, rest)) = bracketed.split_once(']') else {
                return false;
            };
            let is_loopback = ip
                .parse::<Ipv6Addr>()
                .is_ok_and(|ip| IpAddr::V6(ip).to_canonical().is_loopback());
            (is_loopback, rest)
        }
        None => {
            let (name, rest) = authority.split_at(authority.find(':').unwrap_or(authority.len()));
            let is_loopback = name.eq_ignore_ascii_case("localhost")
                || name.parse::<Ipv4Addr>().is_ok_and(|ip| ip.is_loopback());
            (is_loopback, rest)
        }
    };
    is_loopback && (rest.is_empty() || rest.strip_prefix(':').is_some_and(is_port))
}

/// Decimal digits naming a port (0 to 65535); `u16::from_str` alone would take `+80`.
fn is_port(port: &str) -> bool {
    !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit()) && port.parse::<u16>().is_ok()
}

fn peer_of(request: &Request) -> Option<SocketAddr> {
    request
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|ConnectInfo(peer)| *peer)
}

/// A JSON answer (axum's `Json` needs its `json` feature; this is all we need of it).
fn json_response(body: impl Serialize) -> Response {
    match serde_json::to_string(&body) {
        Ok(text) => ([(header::CONTENT_TYPE, "application/json")], text).into_response(),
        Err(err) => (StatusCode::INTERNAL_SERVER_ERROR, err.to_string()).into_response(),
    }
}

fn error(status: StatusCode, message: impl Into<String>) -> Response {
    let mut response = json_response(json!({ "error": message.into() }));
    *response.status_mut() = status;
    response
}

/// The peer of an admin request, as the access check found it.
#[derive(Debug, Clone, Copy)]
struct Peer(Option<SocketAddr>);

async fn check_access(
    State(admin): State<Arc<Admin>>,
    mut request: Request,
    next: Next,
) -> Response {
    let peer = peer_of(&request);
    request.extensions_mut().insert(Peer(peer));
    match &admin.access {
        Access::Token(token) => {
            let given = request
                .headers()
                .get(header::AUTHORIZATION)
                .and_then(|value| value.to_str().ok())
                .and_then(bearer_token)
                .unwrap_or("");
            if !bool::from(given.as_bytes().ct_eq(token.as_bytes())) {
                let mut response = error(
                    StatusCode::UNAUTHORIZED,
                    "the admin routes need `Authorization: Bearer <token>` with the configured token",
                );
                response.headers_mut().insert(
                    header::WWW_AUTHENTICATE,
                    HeaderValue::from_static("Bearer realm=\"hystrix-admin\""),
                );
                return response;
            }
        }
        Access::Loopback => match peer {
            Some(peer) if peer.ip().to_canonical().is_loopback() => {
                if let Some(refusal) = missing_host(&request) {
                    return error(StatusCode::BAD_REQUEST, refusal);
                }
                if let Some(refusal) = not_local(&request) {
                    return error(StatusCode::FORBIDDEN, refusal);
                }
            }
            Some(peer) => {
                return error(
                    StatusCode::FORBIDDEN,
                    format!(
                        "the admin routes answer only loopback peers when no admin token is \
                         configured (this peer: {})",
                        peer.ip()
                    ),
                );
            }
            None => {
                return error(
                    StatusCode::FORBIDDEN,
                    "the admin routes need the peer address to check it is loopback: serve the \
                     router with into_make_service_with_connect_info::<SocketAddr>() (as \
                     Dashboard::serve does), or configure an admin token",
                );
            }
        },
    }
    next.run(request).await
}

// ------------------------------------------------------------------------------------------------
// Configuration

#[derive(Serialize)]
struct LayerValueJson {
    value: Value,
    layer: &'static str,
    origin: Value,
    source: String,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ReportJson {
    name: String,
    value: Value,
    layer: &'static str,
    origin: Value,
    /// The origin as one line of text (`code`, `<path>:<line>`, ...).
    source: String,
    dynamic: bool,
    key_in_use: bool,
    pending: Option<LayerValueJson>,
    overridden: Vec<LayerValueJson>,
}

fn value_json(value: Option<&PropertyValue>) -> Value {
    match value {
        None => Value::Null,
        Some(PropertyValue::Bool(b)) => Value::Bool(*b),
        Some(PropertyValue::Int(i)) => Value::from(*i),
        Some(PropertyValue::Str(s)) => Value::String(s.clone()),
    }
}

fn origin_json(origin: &Origin) -> Value {
    match origin {
        Origin::Code => json!({ "kind": "code" }),
        Origin::File { path, line } => {
            json!({ "kind": "file", "path": path.display().to_string(), "line": line })
        }
        Origin::Environment { variable } => {
            json!({ "kind": "environment", "variable": variable })
        }
        Origin::Section { name } => json!({ "kind": "section", "name": name }),
        Origin::Runtime => json!({ "kind": "runtime" }),
        other => json!({ "kind": "other", "text": other.to_string() }),
    }
}

fn layer_value_json(value: &LayerValue) -> LayerValueJson {
    LayerValueJson {
        value: value_json(value.value.as_ref()),
        layer: value.layer.name(),
        origin: origin_json(&value.origin),
        source: value.origin.to_string(),
    }
}

fn report_json(report: &PropertyReport) -> ReportJson {
    ReportJson {
        name: report.name.clone(),
        value: value_json(report.value.as_ref()),
        layer: report.layer.name(),
        origin: origin_json(&report.origin),
        source: report.origin.to_string(),
        dynamic: report.dynamic,
        key_in_use: report.key_in_use,
        pending: report.pending.as_ref().map(layer_value_json),
        overridden: report.overridden.iter().map(layer_value_json).collect(),
    }
}

fn config_error(err: &ConfigError) -> Response {
    let status = match err {
        ConfigError::UnknownProperty { .. } => StatusCode::NOT_FOUND,
        ConfigError::FixedAfterFirstUse { .. } => StatusCode::CONFLICT,
        _ => StatusCode::BAD_REQUEST,
    };
    error(status, err.to_string())
}

/// Every property of a key: `hystrix.<kind>.<key>.<name>` for each name of `table`.
fn key_config(admin: &Admin, kind: &str, key: &str, table: &[PropertyInfo]) -> Response {
    let mut reports = Vec::with_capacity(table.len());
    for info in table {
        let name = format!("hystrix.{kind}.{key}.{}", info.name);
        match admin.registry.properties().explain(&name) {
            Ok(report) => reports.push(report_json(&report)),
            Err(err) => return config_error(&err),
        }
    }
    json_response(json!({ "kind": kind, "key": key, "properties": reports })).into_response()
}

async fn command_config(State(admin): State<Arc<Admin>>, Path(key): Path<String>) -> Response {
    key_config(&admin, "command", &key, COMMAND_PROPERTIES)
}

async fn pool_config(State(admin): State<Arc<Admin>>, Path(key): Path<String>) -> Response {
    key_config(&admin, "threadpool", &key, THREAD_POOL_PROPERTIES)
}

async fn collapser_config(State(admin): State<Arc<Admin>>, Path(key): Path<String>) -> Response {
    key_config(&admin, "collapser", &key, COLLAPSER_PROPERTIES)
}

fn explained(admin: &Admin, name: &str) -> Response {
    match admin.registry.properties().explain(name) {
        Ok(report) => json_response(report_json(&report)).into_response(),
        Err(err) => config_error(&err),
    }
}

async fn property(State(admin): State<Arc<Admin>>, Path(name): Path<String>) -> Response {
    explained(&admin, &name)
}

/// Reads a PUT's value, at most [`MAX_VALUE_BYTES`]: so refusing a longer one costs no more.
/// A `Content-Length` past it is refused at once, the body unread (hyper then closes the
/// connection, unless the body came whole with the head); a longer chunked body once its byte
/// past the limit arrives. Past the limit: 413; a body that cannot be read (malformed chunks,
/// the request-read timeout): 400. Both with the JSON error of the other refusals.
async fn read_value(body: Body) -> Result<Bytes, Response> {
    let too_large = || {
        error(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("a property value is at most {MAX_VALUE_BYTES} bytes"),
        )
    };
    let limit = u64::try_from(MAX_VALUE_BYTES).unwrap_or(u64::MAX);
    if body.size_hint().lower() > limit {
        return Err(too_large());
    }
    match Limited::new(body, MAX_VALUE_BYTES).collect().await {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(err) if err.downcast_ref::<LengthLimitError>().is_some() => Err(too_large()),
        Err(err) => Err(error(
            StatusCode::BAD_REQUEST,
            format!("the request body could not be read: {err}"),
        )),
    }
}

async fn set_property(
    State(admin): State<Arc<Admin>>,
    Extension(Peer(peer)): Extension<Peer>,
    Path(name): Path<String>,
    body: Body,
) -> Response {
    let body = match read_value(body).await {
        Ok(body) => body,
        Err(refused) => return refused,
    };
    let Ok(body) = std::str::from_utf8(&body) else {
        return error(StatusCode::BAD_REQUEST, "the value must be UTF-8 text");
    };
    let value = body.trim();
    if value.is_empty() {
        return error(
            StatusCode::BAD_REQUEST,
            format!("no value for `{name}`: send it as the request body, e.g. `250` or `true`"),
        );
    }
    if let Err(err) = admin.registry.properties().set(&name, value) {
        return config_error(&err);
    }
    admin.changed(
        peer,
        AdminAction::PropertySet {
            name: name.clone(),
            value: value.to_owned(),
        },
    );
    explained(&admin, &name)
}

async fn unset_property(
    State(admin): State<Arc<Admin>>,
    Extension(Peer(peer)): Extension<Peer>,
    Path(name): Path<String>,
) -> Response {
    match admin.registry.properties().unset(&name) {
        Err(err) => config_error(&err),
        Ok(removed) => {
            if removed {
                admin.changed(peer, AdminAction::PropertyUnset { name: name.clone() });
            }
            explained(&admin, &name)
        }
    }
}

// ------------------------------------------------------------------------------------------------
// Circuit breakers

fn circuit_json(admin: &Admin, command: &str) -> Response {
    let Some(breaker) = admin.registry.circuit_breaker(command) else {
        return error(
            StatusCode::NOT_FOUND,
            format!("no command `{command}` in this registry"),
        );
    };
    let status = match breaker.status() {
        hystrix::circuit::Status::Closed => "CLOSED",
        hystrix::circuit::Status::Open => "OPEN",
        hystrix::circuit::Status::HalfOpen => "HALF_OPEN",
    };
    // The sticky overrides (properties), which the buttons' one-time actions do not change.
    let (forced_open, forced_closed) = hystrix::CommandKey::new(command)
        .map(|key| {
            let props = admin.registry.properties().command(&key);
            (
                props.circuit_breaker_force_open,
                props.circuit_breaker_force_closed,
            )
        })
        .unwrap_or_default();
    json_response(json!({
        "command": command,
        "status": status,
        "isOpen": breaker.is_open(),
        "forcedOpen": forced_open,
        "forcedClosed": forced_closed,
    }))
}

async fn circuit(State(admin): State<Arc<Admin>>, Path(command): Path<String>) -> Response {
    circuit_json(&admin, &command)
}

async fn override_circuit(
    State(admin): State<Arc<Admin>>,
    Extension(Peer(peer)): Extension<Peer>,
    Path((command, action)): Path<(String, String)>,
) -> Response {
    let Some(breaker) = admin.registry.circuit_breaker(&command) else {
        return error(
            StatusCode::NOT_FOUND,
            format!("no command `{command}` in this registry"),
        );
    };
    let action = match action.as_str() {
        "force-open" => {
            breaker.force_open();
            AdminAction::ForceOpen {
                command: command.clone(),
            }
        }
        "force-close" => {
            breaker.force_close();
            AdminAction::ForceClose {
                command: command.clone(),
            }
        }
        "reset" => {
            breaker.reset();
            AdminAction::Reset {
                command: command.clone(),
            }
        }
        other => {
            return error(
                StatusCode::NOT_FOUND,
                format!("unknown breaker action `{other}` (force-open, force-close or reset)"),
            );
        }
    };
    admin.changed(peer, action);
    circuit_json(&admin, &command)
}
