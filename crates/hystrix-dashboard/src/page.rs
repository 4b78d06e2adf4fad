//! The web dashboard: one page, its script and its style sheet, embedded in the binary (no
//! CDN, no external font), reading [`/hystrix.stream`](crate::stream) in the browser.
//!
//! | method and path | what |
//! |---|---|
//! | `GET /hystrix/dashboard/` | the page ([`PAGE_PATH`]) |
//! | `GET /hystrix/dashboard` | a redirect to `dashboard/` (relative, so it works nested) |
//! | `GET /hystrix/dashboard/dashboard.js`, `.../dashboard.css` | the page's script and style |
//! | `GET /hystrix/dashboard/info` | `{"admin": "loopback" \| "token" \| null}`: whether the page shows the breaker buttons, and whether they need a token |
//!
//! The page shows a tile per command (request rate with a sparkline of the last two minutes,
//! error percentage coloured on Hystrix's scale, circuit state, a line of retries per second
//! and retries the retry budget refused per second (our stream's `rollingCountRetry` and
//! `rollingCountRetryBudgetExhausted` over the rolling window, dimmed while both are 0), a line
//! of hedges per second and hedged attempts cancelled per second (`rollingCountHedge` and
//! `rollingCountHedgeCancelled` likewise, dimmed while both are 0), for a command with an
//! adaptive concurrency limit a line of the limit, its executions in flight, its queue and its
//! refusals per second (`adaptiveLimit`, `adaptiveLimitInFlight`, `adaptiveLimitQueued`, and
//! `rollingCountLimitRejected` over the rolling window) with a sparkline of the limit over the
//! last 60 messages (hidden while the command has no adaptive limit and refused nothing), for a
//! command with adaptive throttling a line of its throttling probability and the attempts it
//! throttled per second (`throttleProbability`, and `rollingCountThrottled` over the rolling
//! window; hidden while the command has no throttling and throttled nothing), for a command
//! with slow calls on a line of the slow calls' percentage of its breaker's requests, the
//! percentage at which the breaker trips, the duration over which a call is slow and the slow
//! attempts per second (`slowCallPercentage`, the two
//! `propertyValue_circuitBreakerSlowCall*` thresholds, and `rollingCountSlowCall` over the
//! rolling window; hidden while slow calls are off and none was slow), for a command whose
//! chaos is on a line in the warning colour under the circuit's, so that nobody forgets it
//! is on: `Chaos on: fault 10 % · latency 20 % × 100 ms · hang 5 % · 0.2/s injected`, each
//! rate only when above 0 (our stream's `propertyValue_chaos*` fields), then the attempts
//! injected into per second (`rollingCountChaosInjected` over the rolling window; hidden
//! while chaos is off), the rolling
//! counters by outcome in Hystrix's colours, latency mean and percentiles), per thread
//! pool and per collapser, sorted as the Hystrix Dashboard sorts (error then volume by
//! default).
//!
//! Short-circuited calls are not requests (Hystrix's health rule), so an open circuit's error
//! percentage can read 0 while it refuses every call. The page keeps Hystrix's percentage
//! and says so otherwise: a tile whose circuit is OPEN (or forced open) has a red border and
//! background, a HALF_OPEN one (our stream's `circuitBreakerStatus`) an amber one, whatever the
//! error percentage; beside the percentage it shows the short-circuited calls per second
//! (`rollingCountShortCircuited` over the rolling window) while the circuit is not closed or
//! calls were short-circuited; and the default sort puts circuits that are not closed first,
//! then sorts by error then volume. The dot and the error percentage keep Hystrix's colours.
//! When the
//! [`admin`](crate::admin) routes are enabled, each command tile has Force open / Force close
//! / Reset buttons that `POST` to them; with an admin token the page asks for it once (kept in
//! the tab's `sessionStorage`) and sends it as `Authorization: Bearer`.
//!
//! While its stream is not live the page dims the tiles (their numbers are the last read),
//! and when a stream is refused it shows the server's answer (e.g. `stream refused: 404
//! unknown cluster `nope`; clusters: demo`) and tries again every 5 s.
//!
//! `GET /hystrix/dashboard/?stream=PATH` reads another stream of the page's own origin
//! instead of `/hystrix.stream`, e.g. `?stream=/turbine.stream%3Fcluster%3Ddemo` for a Turbine
//! mounted on the same dashboard; a URL of another origin is refused with a visible message (the
//! page connects to the stream itself; it is no proxy, and its Content-Security-Policy allows
//! its own origin only). On another stream the breaker buttons are off: they act on this
//! instance's breakers, not on a cluster's. A merged stream is read as the Hystrix Dashboard
//! reads it: every tile shows `Hosts: n` (`reportingHosts`; 1 on an instance's own stream)
//! with the rate per host and for the cluster; counts are the cluster's sums; the error
//! percentage (rounded to one decimal, as the Hystrix Dashboard), latencies and batch sizes
//! (floored), the slow-call percentage, the throttling probability and the adaptive limit
//! with its in-flight and queued counts are shown per host (sum / hosts); the circuit reads Open when open on every host, Closed on none, and
//! `Open n Closed m` otherwise (Turbine's `{"true": n, "false": m}`); command and collapser
//! property values are per host already (not divided), thread-pool ones are sums (the queue
//! size and the window divided by the hosts, as the Hystrix Dashboard's `hystrixThreadPool.js`);
//! a string, bool or property the hosts disagree on (Turbine's object of counts by value) shows
//! as `mixed (VALUE: HOSTS, ...)`; and a `deleteData: "true"` message removes the tile.
//!
//! Every URL the page uses is relative to it (`../../hystrix.stream`, `../admin/...`), so the
//! page works wherever the router is nested: `.nest("/ops", router)` serves it at
//! `/ops/hystrix/dashboard/`. [`Dashboard::serve`](crate::Dashboard::serve) also redirects
//! `/` to it; an app that wants the same adds
//! `.route("/", get(|| async { Redirect::temporary("hystrix/dashboard/") }))`.
//!
//! The page is static and shows nothing the stream does not already serve; the buttons work
//! only for whoever the admin routes accept. It is sent with a Content-Security-Policy that
//! allows only its own script, style and connections, and no framing (the buttons cannot be
//! clicked through another site's frame).

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::get;

use crate::admin::Access;

/// Where [`Dashboard::router`](crate::Dashboard::router) serves the page (the path ends with
/// `/`: the page's relative URLs are resolved against it).
pub const PAGE_PATH: &str = "/hystrix/dashboard/";

const HTML: &str = include_str!("../assets/index.html");
const SCRIPT: &str = include_str!("../assets/dashboard.js");
const STYLE: &str = include_str!("../assets/dashboard.css");

/// Only the page's own files and connections; no inline script; no framing.
const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
     connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; \
     frame-ancestors 'none'";

/// What `GET /hystrix/dashboard/info` says of the admin routes.
fn admin_mode(access: Option<&Access>) -> &'static str {
    match access {
        None => r#"{"admin":null}"#,
        Some(Access::Loopback) => r#"{"admin":"loopback"}"#,
        Some(Access::Token(_)) => r#"{"admin":"token"}"#,
    }
}

/// A static file with its content type; browsers check again before reusing it, so a new
/// version of the crate is picked up at once.
fn asset(content_type: &'static str, body: &'static str) -> Response {
    let mut response = (
        [
            (header::CONTENT_TYPE, content_type),
            (header::CACHE_CONTROL, "no-cache"),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        ],
        body,
    )
        .into_response();
    if content_type.starts_with("text/html") {
        response.headers_mut().insert(
            header::CONTENT_SECURITY_POLICY,
            HeaderValue::from_static(CONTENT_SECURITY_POLICY),
        );
        response.headers_mut().insert(
            header::REFERRER_POLICY,
            HeaderValue::from_static("no-referrer"),
        );
    }
    response
}

/// The page's routes; `info` says `access` (the admin routes' access rule, `None` when off).
pub(crate) fn routes<S>(access: Option<Access>) -> Router<S>
where
    S: Clone + Send + Sync + 'static,
{
    let info = admin_mode(access.as_ref());
    Router::new()
        .route(
            "/hystrix/dashboard",
            get(|| async { Redirect::temporary("dashboard/") }),
        )
        .route(
            PAGE_PATH,
            get(|| async { asset("text/html; charset=utf-8", HTML) }),
        )
        .route(
            "/hystrix/dashboard/dashboard.js",
            get(|| async { asset("text/javascript; charset=utf-8", SCRIPT) }),
        )
        .route(
            "/hystrix/dashboard/dashboard.css",
            get(|| async { asset("text/css; charset=utf-8", STYLE) }),
        )
        .route(
            "/hystrix/dashboard/info",
            get(|State(info): State<&'static str>| async move {
                (
                    [
                        (header::CONTENT_TYPE, "application/json"),
                        (header::CACHE_CONTROL, "no-cache, no-store"),
                    ],
                    info,
                )
            })
            .with_state(info),
        )
}

/// `/`, for a dashboard served on its own port: a redirect to the page.
pub(crate) fn root<S>() -> Router<S>
where
    S: Clone + Send + Sync + 'static,
{
    Router::new().route(
        "/",
        get(|| async { Redirect::temporary("hystrix/dashboard/") }),
    )
}
