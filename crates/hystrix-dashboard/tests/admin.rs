//! The admin endpoint: effective configuration with provenance, run-time changes, the manual
//! breaker override, and its access rules (token: 401 without it; no token: loopback only).

#![allow(clippy::unwrap_used)]

mod common;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex, OnceLock};

use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::http::{Method, Request, StatusCode};
use common::{runtime, semaphore_command};
use hystrix::testing::TestRegistry;
use hystrix_dashboard::Dashboard;
use hystrix_dashboard::admin::{AdminAction, AdminChange};
use serde_json::Value;
use tower::ServiceExt;

const TOKEN: &str = "s3cret-admin-token-0123";
const LOOPBACK: &str = "127.0.0.1:50000";
const REMOTE: &str = "10.1.2.3:50000";

/// Sends one request to `router` as if from `peer` (no peer: a server without connect info).
fn send(
    router: &axum::Router,
    method: Method,
    path: &str,
    peer: Option<&str>,
    token: Option<&str>,
    body: &str,
) -> (StatusCode, Value) {
    let authorization = token.map(|token| format!("Bearer {token}"));
    let headers: Vec<(&str, &str)> = authorization
        .iter()
        .map(|value| ("authorization", value.as_str()))
        .collect();
    send_with(router, method, path, peer, &headers, body.as_bytes())
}

/// [`send`] with any headers and a raw body, as HTTP/1.1 (with `Host: localhost` unless
/// `headers` name a host, as a client sends it).
fn send_with(
    router: &axum::Router,
    method: Method,
    path: &str,
    peer: Option<&str>,
    headers: &[(&str, &str)],
    body: &[u8],
) -> (StatusCode, Value) {
    let mut request = Request::builder().method(method).uri(path);
    if !headers
        .iter()
        .any(|(name, _)| name.eq_ignore_ascii_case("host"))
    {
        request = request.header("host", "localhost");
    }
    send_request(router, request, peer, headers, body)
}

/// `request` (method, target, version) with `headers` and `body`, from `peer`.
fn send_request(
    router: &axum::Router,
    mut request: axum::http::request::Builder,
    peer: Option<&str>,
    headers: &[(&str, &str)],
    body: &[u8],
) -> (StatusCode, Value) {
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let mut request = request.body(Body::from(body.to_vec())).unwrap();
    if let Some(peer) = peer {
        let peer: SocketAddr = peer.parse().unwrap();
        request.extensions_mut().insert(ConnectInfo(peer));
    }
    runtime().block_on(async {
        let response = router.clone().oneshot(request).await.unwrap();
        let status = response.status();
        let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .unwrap();
        let json = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        (status, json)
    })
}

fn property<'a>(config: &'a Value, name: &str) -> &'a Value {
    config["properties"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == name)
        .unwrap_or_else(|| panic!("no {name} in {config}"))
}

/// A registry with the SEMAPHORE command "GetUser" (group "Users") and a dashboard router
/// with admin routes: loopback only, or behind `token`.
fn get_user_admin(token: Option<&str>) -> (TestRegistry, axum::Router) {
    let (test, dashboard) = get_user_dashboard(token);
    (test, dashboard.router())
}

/// Whether the breaker of "GetUser" is open.
fn get_user_is_open(test: &TestRegistry) -> bool {
    test.registry()
        .circuit_breaker("GetUser")
        .unwrap()
        .is_open()
}

/// [`get_user_admin`]'s dashboard, to serve.
fn get_user_dashboard(token: Option<&str>) -> (TestRegistry, Dashboard) {
    let test = TestRegistry::new();
    semaphore_command(&test, "GetUser", "Users");
    let builder = Dashboard::builder(test.registry().clone());
    let builder = match token {
        Some(token) => builder.admin_token(token).unwrap(),
        None => builder.admin(),
    };
    let dashboard = builder.build();
    (test, dashboard)
}

/// A dashboard router for `registry` with admin routes for loopback peers, and the changes its
/// `on_admin_change` callback is told of, in order.
fn heard_admin(registry: &hystrix::Registry) -> (axum::Router, Arc<Mutex<Vec<AdminChange>>>) {
    let changes: Arc<Mutex<Vec<AdminChange>>> = Arc::default();
    let heard = Arc::clone(&changes);
    let router = Dashboard::builder(registry.clone())
        .admin()
        .on_admin_change(move |change| heard.lock().unwrap().push(change.clone()))
        .build()
        .router();
    (router, changes)
}

#[test]
fn without_a_token_only_loopback_peers_are_served() {
    let (test, router) = get_user_admin(None);
    let path = "/hystrix/admin/circuit/GetUser";
    assert_eq!(
        send(&router, Method::GET, path, Some(LOOPBACK), None, "").0,
        StatusCode::OK
    );
    let (status, body) = send(&router, Method::GET, path, Some("[::1]:4000"), None, "");
    assert_eq!(
        (status, &body["status"]),
        (StatusCode::OK, &Value::from("CLOSED"))
    );

    let (status, body) = send(
        &router,
        Method::POST,
        &format!("{path}/force-open"),
        Some(REMOTE),
        None,
        "",
    );
    assert_eq!(status, StatusCode::FORBIDDEN);
    assert_eq!(
        body["error"],
        "the admin routes answer only loopback peers when no admin token is configured (this \
         peer: 10.1.2.3)"
    );
    // Refused: nothing changed.
    assert!(!get_user_is_open(&test));

    // A server that gives no peer address: refused, with the way out.
    let (status, body) = send(&router, Method::GET, path, None, None, "");
    assert_eq!(status, StatusCode::FORBIDDEN);
    assert!(
        body["error"]
            .as_str()
            .unwrap()
            .contains("into_make_service_with_connect_info::<SocketAddr>()"),
        "{body}"
    );
}

#[test]
fn with_a_token_every_request_needs_it_from_any_peer() {
    let (_test, router) = get_user_admin(Some(TOKEN));
    let path = "/hystrix/admin/circuit/GetUser";
    for (peer, token) in [
        (Some(LOOPBACK), None),
        (Some(LOOPBACK), Some("s3cret-admin-token-0124")),
        (Some(REMOTE), Some("short")),
        (None, Some("")),
    ] {
        let (status, body) = send(&router, Method::GET, path, peer, token, "");
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{peer:?} {token:?}");
        assert_eq!(
            body["error"],
            "the admin routes need `Authorization: Bearer <token>` with the configured token"
        );
    }
    let (status, body) = send(&router, Method::GET, path, Some(REMOTE), Some(TOKEN), "");
    assert_eq!(
        (status, &body["isOpen"]),
        (StatusCode::OK, &Value::Bool(false))
    );
    let (status, _) = send(&router, Method::GET, path, None, Some(TOKEN), "");
    assert_eq!(status, StatusCode::OK);

    // The streams and /metrics are not admin routes: no token needed.
    let (status, _) = send(&router, Method::GET, "/metrics", Some(REMOTE), None, "");
    assert_eq!(status, StatusCode::OK);
}

#[test]
fn weak_tokens_are_refused_at_build_time() {
    let test = TestRegistry::new();
    for (token, message) in [
        ("", "invalid admin token: must be at least 16 characters"),
        (
            "too-short",
            "invalid admin token: must be at least 16 characters",
        ),
        (
            "has a space in it!!",
            "invalid admin token: must be visible ASCII characters without spaces",
        ),
    ] {
        let err = Dashboard::builder(test.registry().clone())
            .admin_token(token)
            .unwrap_err();
        assert_eq!(err.to_string(), message);
    }
}

#[test]
fn the_configuration_shows_each_value_with_its_layer_and_source() {
    let test = TestRegistry::new();
    let registry = test.registry();
    registry
        .properties()
        .load_env_from([(
            "HYSTRIX__command__default__circuitBreaker__sleepWindowInMilliseconds",
            "700",
        )])
        .unwrap();
    registry
        .properties()
        .set(
            "hystrix.command.GetUser.execution.isolation.thread.timeoutInMilliseconds",
            250,
        )
        .unwrap();
    semaphore_command(&test, "GetUser", "Users");
    let router = Dashboard::builder(registry.clone())
        .admin()
        .build()
        .router();

    let (status, config) = send(
        &router,
        Method::GET,
        "/hystrix/admin/config/commands/GetUser",
        Some(LOOPBACK),
        None,
        "",
    );
    assert_eq!(status, StatusCode::OK);
    assert_eq!(config["kind"], "command");
    assert_eq!(config["key"], "GetUser");
    assert_eq!(
        config["properties"].as_array().unwrap().len(),
        hystrix::config::COMMAND_PROPERTIES.len()
    );
    let timeout = property(
        &config,
        "hystrix.command.GetUser.execution.isolation.thread.timeoutInMilliseconds",
    );
    assert_eq!(timeout["value"], 250);
    assert_eq!(timeout["layer"], "per key");
    assert_eq!(timeout["origin"]["kind"], "runtime");
    assert_eq!(timeout["source"], "run time");
    assert_eq!(timeout["dynamic"], true);
    assert_eq!(timeout["keyInUse"], true);
    assert_eq!(timeout["overridden"][0]["value"], 1000);
    assert_eq!(timeout["overridden"][0]["layer"], "code default");

    let sleep = property(
        &config,
        "hystrix.command.GetUser.circuitBreaker.sleepWindowInMilliseconds",
    );
    assert_eq!(sleep["value"], 700);
    assert_eq!(sleep["layer"], "global default");
    assert_eq!(
        sleep["origin"],
        serde_json::json!({
            "kind": "environment",
            "variable": "HYSTRIX__command__default__circuitBreaker__sleepWindowInMilliseconds"
        })
    );
    let window = property(
        &config,
        "hystrix.command.GetUser.metrics.rollingStats.timeInMilliseconds",
    );
    assert_eq!(
        (&window["value"], &window["dynamic"]),
        (&Value::from(10000), &Value::Bool(false))
    );

    let (status, pool) = send(
        &router,
        Method::GET,
        "/hystrix/admin/config/threadpools/Users",
        Some(LOOPBACK),
        None,
        "",
    );
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        property(&pool, "hystrix.threadpool.Users.coreSize")["value"],
        10
    );
    let (status, collapser) = send(
        &router,
        Method::GET,
        "/hystrix/admin/config/collapsers/Ratings",
        Some(LOOPBACK),
        None,
        "",
    );
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        property(
            &collapser,
            "hystrix.collapser.Ratings.timerDelayInMilliseconds"
        )["value"],
        10
    );
}

#[test]
fn put_and_delete_change_a_property_for_the_next_execution_and_tell_the_callback() {
    let test = TestRegistry::new();
    let cmd = semaphore_command(&test, "GetUser", "Users");
    let (router, changes) = heard_admin(test.registry());
    let name = "hystrix.command.GetUser.execution.isolation.semaphore.maxConcurrentRequests";
    let path = format!("/hystrix/admin/config/properties/{name}");

    let (status, report) = send(&router, Method::PUT, &path, Some(LOOPBACK), None, " 0\n");
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        (&report["value"], &report["source"]),
        (&Value::from(0), &Value::from("run time"))
    );
    // A semaphore of 0 rejects the next execution (SPEC Part A 32).
    let err = cmd.run(|| Ok::<_, common::Boom>(1)).execute().unwrap_err();
    assert_eq!(
        err.failure_type(),
        hystrix::FailureType::RejectedSemaphoreExecution
    );

    let (status, report) = send(&router, Method::DELETE, &path, Some(LOOPBACK), None, "");
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        (&report["value"], &report["layer"]),
        (&Value::from(10), &Value::from("code default"))
    );
    assert_eq!(cmd.run(|| Ok::<_, common::Boom>(1)).execute().unwrap(), 1);

    let peer: SocketAddr = LOOPBACK.parse().unwrap();
    assert_eq!(
        *changes.lock().unwrap(),
        [
            AdminChange::new(
                Some(peer),
                AdminAction::PropertySet {
                    name: name.to_owned(),
                    value: "0".to_owned()
                }
            ),
            AdminChange::new(
                Some(peer),
                AdminAction::PropertyUnset {
                    name: name.to_owned()
                }
            ),
        ]
    );
}

#[test]
fn refused_changes_name_the_property_and_change_nothing() {
    let test = TestRegistry::new();
    semaphore_command(&test, "GetUser", "Users");
    let (router, changes) = heard_admin(test.registry());
    let put = |name: &str, body: &str| {
        send(
            &router,
            Method::PUT,
            &format!("/hystrix/admin/config/properties/{name}"),
            Some(LOOPBACK),
            None,
            body,
        )
    };
    let threshold = "hystrix.command.GetUser.circuitBreaker.errorThresholdPercentage";
    let window = "hystrix.command.GetUser.metrics.rollingStats.timeInMilliseconds";
    let cases = [
        (
            threshold,
            "120",
            StatusCode::BAD_REQUEST,
            format!("invalid value `120` for `{threshold}`: must be a percentage from 0 to 100"),
        ),
        (
            "hystrix.command.GetUser.execution.timeout",
            "5",
            StatusCode::NOT_FOUND,
            "unknown property `hystrix.command.GetUser.execution.timeout`".to_owned(),
        ),
        (
            window,
            "20000",
            StatusCode::CONFLICT,
            format!("`{window}` is fixed"),
        ),
        (
            threshold,
            "",
            StatusCode::BAD_REQUEST,
            format!(
                "no value for `{threshold}`: send it as the request body, e.g. `250` or `true`"
            ),
        ),
    ];
    for (name, value, status, message) in cases {
        let (got, body) = put(name, value);
        assert_eq!(got, status, "{name} = {value:?}: {body}");
        let error = body["error"].as_str().unwrap();
        assert!(error.contains(&message), "{error}");
    }
    assert_eq!(
        test.registry()
            .properties()
            .command(&hystrix::CommandKey::new("GetUser").unwrap())
            .circuit_breaker_error_threshold_percentage,
        50
    );
    assert!(changes.lock().unwrap().is_empty());
}

#[test]
fn the_breaker_override_opens_closes_and_resets() {
    let test = TestRegistry::new();
    let cmd = semaphore_command(&test, "GetUser", "Users");
    let changes: Arc<Mutex<Vec<AdminChange>>> = Arc::default();
    let heard = Arc::clone(&changes);
    let router = Dashboard::builder(test.registry().clone())
        .admin_token(TOKEN)
        .unwrap()
        .on_admin_change(move |change| heard.lock().unwrap().push(change.clone()))
        .build()
        .router();
    let post = |action: &str| {
        send(
            &router,
            Method::POST,
            &format!("/hystrix/admin/circuit/GetUser/{action}"),
            Some(REMOTE),
            Some(TOKEN),
            "",
        )
    };
    let (status, body) = post("force-open");
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        body,
        serde_json::json!({"command": "GetUser", "status": "OPEN", "isOpen": true, "forcedOpen": false, "forcedClosed": false})
    );
    let err = cmd.run(|| Ok::<_, common::Boom>(1)).execute().unwrap_err();
    assert_eq!(err.failure_type(), hystrix::FailureType::ShortCircuit);

    let (_, body) = post("force-close");
    assert_eq!(body["status"], "CLOSED");
    assert_eq!(cmd.run(|| Ok::<_, common::Boom>(1)).execute().unwrap(), 1);
    let (_, body) = post("reset");
    assert_eq!(body["isOpen"], false);

    let (status, body) = post("explode");
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(
        body["error"],
        "unknown breaker action `explode` (force-open, force-close or reset)"
    );
    let (status, body) = send(
        &router,
        Method::POST,
        "/hystrix/admin/circuit/Nobody/force-open",
        Some(REMOTE),
        Some(TOKEN),
        "",
    );
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(body["error"], "no command `Nobody` in this registry");

    let peer: SocketAddr = REMOTE.parse().unwrap();
    let command = || "GetUser".to_owned();
    assert_eq!(
        *changes.lock().unwrap(),
        [
            AdminChange::new(Some(peer), AdminAction::ForceOpen { command: command() }),
            AdminChange::new(Some(peer), AdminAction::ForceClose { command: command() }),
            AdminChange::new(Some(peer), AdminAction::Reset { command: command() }),
        ]
    );
}

#[test]
fn dashboard_serve_gives_the_peer_address_so_a_loopback_client_is_served() {
    let (_test, dashboard) = get_user_dashboard(None);
    runtime().block_on(async move {
        // A free port, then serve on it (Dashboard::serve binds by port).
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        tokio::spawn(dashboard.serve(port));
        let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
        let response = common::within(async {
            loop {
                match tokio::net::TcpStream::connect(addr).await {
                    Ok(stream) => {
                        break common::get_on(stream, "/hystrix/admin/circuit/GetUser").await;
                    }
                    Err(_) => tokio::time::sleep(std::time::Duration::from_millis(5)).await,
                }
            }
        })
        .await;
        assert_eq!(response.status, 200);
        assert!(response.body().await.contains("\"status\":\"CLOSED\""));
    });
}

#[test]
fn loopback_mode_serves_only_direct_local_clients() {
    let (test, router) = get_user_admin(None);
    let path = "/hystrix/admin/circuit/GetUser";
    let get = |peer: &str, headers: &[(&str, &str)]| {
        send_with(&router, Method::GET, path, Some(peer), headers, b"")
    };
    // Direct local clients: any loopback form, a loopback Host and Origin.
    for (peer, headers) in [
        (LOOPBACK, vec![("host", "127.0.0.1:7979")]),
        ("[::ffff:127.0.0.1]:4000", vec![("host", "localhost:7979")]),
        (
            "[::1]:4000",
            vec![("host", "[::1]:7979"), ("origin", "http://localhost:7979")],
        ),
    ] {
        assert_eq!(get(peer, &headers).0, StatusCode::OK, "{peer} {headers:?}");
    }
    // Through a proxy on the host, for another host name (DNS rebinding), or from a web page
    // of another origin: refused, and the breaker stays as it was.
    for (headers, message) in [
        (
            vec![("x-forwarded-for", "192.0.2.7")],
            "this request came through a proxy (`x-forwarded-for`)",
        ),
        (vec![("forwarded", "for=192.0.2.7")], "(`forwarded`)"),
        (vec![("x-real-ip", "192.0.2.7")], "(`x-real-ip`)"),
        (
            vec![("host", "evil.example:7979")],
            "for a loopback host (this one: `evil.example:7979`)",
        ),
        (
            vec![
                ("host", "127.0.0.1:7979"),
                ("origin", "http://evil.example"),
            ],
            "from web pages of other origins (this one: `http://evil.example`)",
        ),
    ] {
        let (status, body) = send_with(
            &router,
            Method::POST,
            &format!("{path}/force-open"),
            Some(LOOPBACK),
            &headers,
            b"",
        );
        assert_eq!(status, StatusCode::FORBIDDEN, "{headers:?}");
        let error = body["error"].as_str().unwrap();
        assert!(error.contains(message), "{error}");
    }
    assert!(!get_user_is_open(&test));
}

/// POSTs force-open for "GetUser" from a loopback peer with `headers` to `uri`; returns the
/// status and the error message, and asserts a refusal left the breaker closed.
fn force_open_from_loopback(
    test: &TestRegistry,
    router: &axum::Router,
    uri: &str,
    headers: &[(&str, &str)],
) -> (StatusCode, String) {
    let (status, body) = send_with(router, Method::POST, uri, Some(LOOPBACK), headers, b"");
    let breaker = test.registry().circuit_breaker("GetUser").unwrap();
    if status == StatusCode::OK {
        breaker.reset();
    } else {
        assert!(
            !breaker.is_open(),
            "{headers:?}: refused, yet the breaker opened"
        );
    }
    (status, body["error"].as_str().unwrap_or("").to_owned())
}

const FORCE_OPEN: &str = "/hystrix/admin/circuit/GetUser/force-open";

#[test]
fn forged_host_and_origin_forms_are_refused() {
    let (test, router) = get_user_admin(None);
    let host = |value: &'static str| vec![("host", value)];
    let origin = |value: &'static str| vec![("host", "localhost:7979"), ("origin", value)];
    let foreign_host = "the admin routes without a token answer only requests for a loopback host";
    let foreign_origin = "refuse requests from web pages of other origins";
    for (headers, message) in [
        // A loopback name followed by something else than `:<port>`.
        (host("localhost:evil.com"), foreign_host),
        (host("[::1]evil.com"), foreign_host),
        (host("127.0.0.1.evil.com"), foreign_host),
        (host("localhost.evil.com"), foreign_host),
        (host("localhost."), foreign_host),
        (host("user@localhost"), foreign_host),
        (host("localhost@evil.com"), foreign_host),
        (host("localhost:80@evil.com"), foreign_host),
        (host("localhost:"), foreign_host),
        (host("localhost:99999"), foreign_host),
        (host("localhost:+80"), foreign_host),
        (host("localhost:80:80"), foreign_host),
        (host("[::1"), foreign_host),
        (host("[::1]:"), foreign_host),
        (host("[evil.com]"), foreign_host),
        (host("::1"), foreign_host),
        (host("127.1"), foreign_host),
        (host(""), foreign_host),
        // Two Host headers, whichever comes first.
        (
            vec![("host", "localhost"), ("host", "evil.com")],
            "more than one `host` header",
        ),
        (
            vec![("host", "evil.com"), ("host", "localhost")],
            "more than one `host` header",
        ),
        // Origins: the same host rules, an http(s) scheme, nothing after the port.
        (origin("http://localhost:evil.com"), foreign_origin),
        (origin("http://[::1]evil.com"), foreign_origin),
        (origin("http://user@localhost"), foreign_origin),
        (origin("http://localhost:7979/"), foreign_origin),
        (origin("http://localhost:7979/path"), foreign_origin),
        (origin("http://"), foreign_origin),
        (origin("null"), foreign_origin),
        (origin("localhost"), foreign_origin),
        (origin("file://localhost"), foreign_origin),
        (origin("chrome-extension://localhost"), foreign_origin),
        (
            vec![
                ("host", "localhost"),
                ("origin", "http://localhost"),
                ("origin", "http://evil.com"),
            ],
            "more than one `origin` header",
        ),
        // A proxy that names the host the client asked for.
        (
            vec![("host", "localhost"), ("x-forwarded-host", "localhost")],
            "this request came through a proxy (`x-forwarded-host`)",
        ),
        (
            vec![("host", "localhost"), ("x-forwarded-proto", "https")],
            "this request came through a proxy (`x-forwarded-proto`)",
        ),
    ] {
        let (status, error) = force_open_from_loopback(&test, &router, FORCE_OPEN, &headers);
        assert_eq!(status, StatusCode::FORBIDDEN, "{headers:?}");
        assert!(error.contains(message), "{headers:?}: {error}");
    }

    // An absolute request target names the host too (RFC 9112 3.2.2): both must be loopback.
    for (target, host_header) in [("evil.com", "localhost"), ("localhost", "evil.com")] {
        let uri = format!("http://{target}{FORCE_OPEN}");
        let (status, error) = force_open_from_loopback(&test, &router, &uri, &host(host_header));
        assert_eq!(status, StatusCode::FORBIDDEN, "{uri}");
        assert!(error.contains("(this one: `evil.com`)"), "{error}");
    }
}

#[test]
fn loopback_hosts_and_origins_pass_with_or_without_a_port() {
    let (test, router) = get_user_admin(None);
    for host in [
        "127.0.0.1",
        "127.0.0.1:8080",
        "127.0.0.2:8080",
        "localhost",
        "localhost:8080",
        "LocalHost:8080",
        "localhost:0",
        "localhost:65535",
        "[::1]",
        "[::1]:8080",
        "[0:0:0:0:0:0:0:1]:8080",
        "[::ffff:127.0.0.1]:8080",
    ] {
        let origin = format!("http://{host}");
        let secure_origin = format!("HTTPS://{host}");
        for headers in [
            vec![("host", host)],
            vec![("host", host), ("origin", origin.as_str())],
            vec![("host", host), ("origin", secure_origin.as_str())],
        ] {
            let (status, error) = force_open_from_loopback(&test, &router, FORCE_OPEN, &headers);
            assert_eq!(status, StatusCode::OK, "{headers:?}: {error}");
        }
    }
    // No Host at all: an HTTP/1.0 client may omit it; an HTTP/1.1 request is malformed
    // (RFC 9112 3.2) and changes nothing.
    for (version, expected) in [
        (axum::http::Version::HTTP_10, StatusCode::OK),
        (axum::http::Version::HTTP_11, StatusCode::BAD_REQUEST),
    ] {
        let request = Request::builder()
            .method(Method::POST)
            .uri(FORCE_OPEN)
            .version(version);
        let (status, body) = send_request(&router, request, Some(LOOPBACK), &[], b"");
        assert_eq!(status, expected, "{version:?}: {body}");
        let breaker = test.registry().circuit_breaker("GetUser").unwrap();
        assert_eq!(breaker.is_open(), expected == StatusCode::OK, "{version:?}");
        breaker.reset();
        if expected == StatusCode::BAD_REQUEST {
            assert_eq!(
                body["error"],
                "an HTTP/1.1 request must carry a `Host` header (RFC 9112 3.2)"
            );
        }
    }
    // An absolute target naming a loopback host.
    let (status, _) = force_open_from_loopback(
        &test,
        &router,
        "http://localhost:7979/hystrix/admin/circuit/GetUser/force-open",
        &[("host", "localhost:7979")],
    );
    assert_eq!(status, StatusCode::OK);
}

#[test]
fn forged_hosts_and_origins_are_refused_over_a_real_connection() {
    let (test, dashboard) = get_user_dashboard(None);
    runtime().block_on(async move {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(dashboard.serve_on(listener));
        let post = |headers: &str| {
            format!(
                "POST {FORCE_OPEN} HTTP/1.1\r\n{headers}Content-Length: 0\r\nConnection: \
                 close\r\n\r\n"
            )
        };
        for headers in [
            "Host: localhost:evil.com\r\n",
            "Host: [::1]evil.com\r\n",
            "Host: localhost\r\nHost: evil.com\r\n",
            "Host: localhost\r\nOrigin: http://localhost:evil.com\r\n",
            "Host: localhost\r\nOrigin: http://[::1]evil.com\r\n",
            "Host: localhost\r\nOrigin: http://localhost\r\nOrigin: http://evil.com\r\n",
            "Host: localhost\r\nX-Forwarded-Host: localhost\r\n",
        ] {
            let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
            let response = common::within(common::send_on(stream, &post(headers))).await;
            assert_eq!(response.status, 403, "{headers:?}");
        }
        assert!(!get_user_is_open(&test));
        let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        let headers = "Host: 127.0.0.1:7979\r\nOrigin: http://127.0.0.1:7979\r\n";
        let response = common::within(common::send_on(stream, &post(headers))).await;
        assert_eq!(response.status, 200);
        assert!(get_user_is_open(&test));
    });
}

#[test]
fn the_bearer_scheme_is_case_insensitive() {
    let (_test, router) = get_user_admin(Some(TOKEN));
    for (authorization, expected) in [
        (format!("bearer {TOKEN}"), StatusCode::OK),
        (format!("BEARER {TOKEN}"), StatusCode::OK),
        (format!("Bearer {TOKEN}"), StatusCode::OK),
        (format!("Basic {TOKEN}"), StatusCode::UNAUTHORIZED),
    ] {
        let (status, _) = send_with(
            &router,
            Method::GET,
            "/hystrix/admin/circuit/GetUser",
            Some(REMOTE),
            &[("authorization", &authorization)],
            b"",
        );
        assert_eq!(status, expected, "{authorization}");
    }
}

#[test]
fn odd_bodies_are_refused_and_a_panicking_callback_does_not_lose_the_answer() {
    let test = TestRegistry::new();
    semaphore_command(&test, "GetUser", "Users");
    let router = Dashboard::builder(test.registry().clone())
        .admin()
        .on_admin_change(|_| panic!("audit sink down"))
        .build()
        .router();
    let name = "hystrix.command.GetUser.circuitBreaker.sleepWindowInMilliseconds";
    let path = format!("/hystrix/admin/config/properties/{name}");
    let put = |body: &[u8]| send_with(&router, Method::PUT, &path, Some(LOOPBACK), &[], body);
    let (status, body) = put(&vec![b'1'; 1025]);
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(body["error"], "a property value is at most 1024 bytes");
    let (status, body) = put(&[0xff, 0xfe]);
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(body["error"], "the value must be UTF-8 text");

    // The callback panics: the change stands and is answered.
    let (status, report) = put(b"2500");
    assert_eq!(
        (status, &report["value"]),
        (StatusCode::OK, &Value::from(2500))
    );
    let (status, body) = send(
        &router,
        Method::POST,
        "/hystrix/admin/circuit/GetUser/force-open",
        Some(LOOPBACK),
        None,
        "",
    );
    assert_eq!(
        (status, &body["status"]),
        (StatusCode::OK, &Value::from("OPEN"))
    );
}

#[test]
fn the_circuit_shows_the_sticky_overrides() {
    let (_test, router) = get_user_admin(None);
    let (status, _) = send(
        &router,
        Method::PUT,
        "/hystrix/admin/config/properties/hystrix.command.GetUser.circuitBreaker.forceOpen",
        Some(LOOPBACK),
        None,
        "on",
    );
    assert_eq!(status, StatusCode::OK);
    let (_, body) = send(
        &router,
        Method::GET,
        "/hystrix/admin/circuit/GetUser",
        Some(LOOPBACK),
        None,
        "",
    );
    assert_eq!(
        body,
        serde_json::json!({
            "command": "GetUser",
            "status": "CLOSED",
            "isOpen": true,
            "forcedOpen": true,
            "forcedClosed": false
        })
    );
}

/// A subscriber collecting the log lines of target `hystrix::admin`: the message, then each
/// other field as ` name=value`.
#[derive(Clone, Default)]
struct AdminLog(Arc<Mutex<Vec<String>>>);

/// The `hystrix::admin` log lines of this test binary, from a global subscriber installed
/// once (as the core crate's tracing tests do: a subscriber scoped to one thread shares the
/// call sites' cached interest with the other tests' threads, and lost events here).
fn admin_log() -> &'static Mutex<Vec<String>> {
    static LOG: OnceLock<AdminLog> = OnceLock::new();
    &LOG.get_or_init(|| {
        let log = AdminLog::default();
        tracing::subscriber::set_global_default(log.clone()).unwrap();
        // A call site another test's thread was registering meanwhile gets its interest again.
        tracing::callsite::rebuild_interest_cache();
        log
    })
    .0
}

impl tracing::Subscriber for AdminLog {
    fn enabled(&self, metadata: &tracing::Metadata<'_>) -> bool {
        metadata.target() == "hystrix::admin"
    }

    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }

    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}

    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}

    fn event(&self, event: &tracing::Event<'_>) {
        #[derive(Default)]
        struct Line {
            message: String,
            fields: String,
        }
        impl tracing::field::Visit for Line {
            fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
                if field.name() == "message" {
                    self.message = format!("{value:?}");
                } else {
                    self.fields
                        .push_str(&format!(" {}={value:?}", field.name()));
                }
            }
        }
        let mut line = Line::default();
        event.record(&mut line);
        self.0.lock().unwrap().push(line.message + &line.fields);
    }

    fn enter(&self, _: &tracing::span::Id) {}

    fn exit(&self, _: &tracing::span::Id) {}
}

#[test]
fn chaos_is_turned_on_and_off_at_run_time_and_each_change_is_logged_and_heard() {
    let test = TestRegistry::new(); // allows chaos
    let cmd = semaphore_command(&test, "GetProfile", "Users");
    let (router, changes) = heard_admin(test.registry());
    let enabled = "hystrix.command.GetProfile.chaos.enabled";
    let fault = "hystrix.command.GetProfile.chaos.fault.ratePercentage";
    let change = |method: Method, name: &str, body: &str| {
        let path = format!("/hystrix/admin/config/properties/{name}");
        let (status, report) = send(&router, method, &path, Some(LOOPBACK), None, body);
        assert_eq!(status, StatusCode::OK, "{name} = {body:?}: {report}");
        report
    };
    let execute = || {
        cmd.run(|| Ok::<_, common::Boom>(1))
            .execute()
            .map_err(|err| err.failure_type())
    };
    let log = admin_log();
    // A fault rate alone injects nothing.
    change(Method::PUT, fault, "100");
    assert_eq!(execute(), Ok(1));
    // On: every execution's run is replaced by an injected fault.
    let report = change(Method::PUT, enabled, "true");
    assert_eq!(
        (&report["value"], &report["source"], &report["dynamic"]),
        (
            &Value::from(true),
            &Value::from("run time"),
            &Value::from(true)
        )
    );
    assert_eq!(execute(), Err(hystrix::FailureType::InjectedFault));
    // Off again with `false`.
    change(Method::PUT, enabled, "false");
    assert_eq!(execute(), Ok(1));
    // On, then off by removing the run-time value (the default, false, shows through).
    change(Method::PUT, enabled, "true");
    assert_eq!(execute(), Err(hystrix::FailureType::InjectedFault));
    let report = change(Method::DELETE, enabled, "");
    assert_eq!(
        (&report["value"], &report["layer"]),
        (&Value::from(false), &Value::from("code default"))
    );
    assert_eq!(execute(), Ok(1));
    let metrics = test.registry().command_metrics("GetProfile").unwrap();
    assert_eq!(
        metrics.cumulative_count(hystrix::EventType::ChaosInjected),
        2
    );

    let set = |name: &str, value: &str| AdminAction::PropertySet {
        name: name.to_owned(),
        value: value.to_owned(),
    };
    let expected = [
        set(fault, "100"),
        set(enabled, "true"),
        set(enabled, "false"),
        set(enabled, "true"),
        AdminAction::PropertyUnset {
            name: enabled.to_owned(),
        },
    ];
    let peer: SocketAddr = LOOPBACK.parse().unwrap();
    let heard: Vec<AdminChange> = expected
        .iter()
        .map(|action| AdminChange::new(Some(peer), action.clone()))
        .collect();
    assert_eq!(*changes.lock().unwrap(), heard);
    let logged: Vec<String> = expected
        .iter()
        .map(|action| format!("hystrix admin: {action} peer={LOOPBACK}"))
        .collect();
    // The other tests of this binary log changes too, none of GetProfile's.
    let profile_lines: Vec<String> = log
        .lock()
        .unwrap()
        .iter()
        .filter(|line| line.contains("hystrix.command.GetProfile."))
        .cloned()
        .collect();
    assert_eq!(profile_lines, logged);
    assert_eq!(
        logged[1],
        "hystrix admin: set hystrix.command.GetProfile.chaos.enabled = true peer=127.0.0.1:50000"
    );
}

#[test]
fn chaos_cannot_be_turned_on_in_a_registry_that_does_not_allow_it() {
    let registry = hystrix::Registry::builder()
        .clock(hystrix::clock::ManualClock::new())
        .build();
    let cmd = hystrix::Command::builder("GetUser")
        .group("Users")
        .isolation(hystrix::IsolationStrategy::Semaphore)
        .build_in(&registry)
        .unwrap();
    let (router, changes) = heard_admin(&registry);
    let enabled = "hystrix.command.GetUser.chaos.enabled";
    let put = |name: &str, body: &str| {
        let path = format!("/hystrix/admin/config/properties/{name}");
        send(&router, Method::PUT, &path, Some(LOOPBACK), None, body)
    };
    // The rates alone are accepted (they inject nothing)...
    let (status, _) = put("hystrix.command.GetUser.chaos.fault.ratePercentage", "100");
    assert_eq!(status, StatusCode::OK);
    // ...the switch is refused, naming the property and the registry's switch.
    let (status, body) = put(enabled, "true");
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    let error = body["error"].as_str().unwrap();
    assert!(
        error.starts_with(&format!("invalid value `true` for `{enabled}`")),
        "{error}"
    );
    assert!(
        error.contains("RegistryBuilder::allow_chaos(true)"),
        "{error}"
    );
    // Nothing changed: chaos is off, the run runs, and only the accepted change was heard.
    let (status, report) = send(
        &router,
        Method::GET,
        &format!("/hystrix/admin/config/properties/{enabled}"),
        Some(LOOPBACK),
        None,
        "",
    );
    assert_eq!(status, StatusCode::OK);
    assert_eq!(report["value"], false);
    assert_eq!(cmd.run(|| Ok::<_, common::Boom>(1)).execute().unwrap(), 1);
    assert_eq!(changes.lock().unwrap().len(), 1);
    // `false` is accepted: there is nothing to refuse.
    let (status, _) = put(enabled, "false");
    assert_eq!(status, StatusCode::OK);
}
