//! The web dashboard's routes: the page and its files with their content types, only relative
//! URLs in them (so the page works nested), the info endpoint saying whether the breaker
//! buttons show, and `/` on a dashboard served on its own port.

#![allow(clippy::unwrap_used)]

mod common;

use axum::body::Body;
use axum::http::{Method, Request, StatusCode, header};
use common::{runtime, semaphore_command};
use hystrix::testing::TestRegistry;
use hystrix_dashboard::Dashboard;
use hystrix_dashboard::page::PAGE_PATH;
use tower::ServiceExt;

const TOKEN: &str = "s3cret-admin-token-0123";

/// A response's status, content type, `Location` and body (the body only when `read_body`:
/// a stream's never ends).
struct Answer {
    status: StatusCode,
    content_type: String,
    location: Option<String>,
    headers: axum::http::HeaderMap,
    body: String,
}

fn send(router: &axum::Router, method: Method, path: &str, token: Option<&str>) -> Answer {
    // As a client sends it: HTTP/1.1 names its host.
    let mut request = Request::builder()
        .method(method)
        .uri(path)
        .header(header::HOST, "localhost");
    if let Some(token) = token {
        request = request.header(header::AUTHORIZATION, format!("Bearer {token}"));
    }
    let request = request.body(Body::empty()).unwrap();
    runtime().block_on(async {
        let response = router.clone().oneshot(request).await.unwrap();
        let headers = response.headers().clone();
        let text = |name| {
            headers
                .get(name)
                .map(|v: &axum::http::HeaderValue| v.to_str().unwrap().to_owned())
        };
        let content_type = text(header::CONTENT_TYPE).unwrap_or_default();
        let location = text(header::LOCATION);
        let status = response.status();
        let body = if content_type.starts_with("text/event-stream") {
            String::new()
        } else {
            let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
                .await
                .unwrap();
            String::from_utf8(bytes.to_vec()).unwrap()
        };
        Answer {
            status,
            content_type,
            location,
            headers,
            body,
        }
    })
}

fn get(router: &axum::Router, path: &str) -> Answer {
    send(router, Method::GET, path, None)
}

/// `relative` resolved against the directory `base` (a path ending with `/`), as a browser
/// resolves a relative URL's path.
fn resolve(base: &str, relative: &str) -> String {
    assert!(base.ends_with('/'), "{base}");
    let mut segments: Vec<&str> = base.split('/').filter(|s| !s.is_empty()).collect();
    let parts: Vec<&str> = relative.split('/').collect();
    for (i, part) in parts.iter().enumerate() {
        match *part {
            ".." => {
                segments.pop();
            }
            "." => {}
            "" if i + 1 < parts.len() => {}
            part => segments.push(part),
        }
    }
    let mut path = format!("/{}", segments.join("/"));
    if relative.ends_with('/') && !path.ends_with('/') {
        path.push('/');
    }
    path
}

/// The values of `attribute="..."` in `html`.
fn attribute_values<'a>(html: &'a str, attribute: &str) -> Vec<&'a str> {
    let needle = format!("{attribute}=\"");
    html.match_indices(&needle)
        .map(|(at, _)| {
            let rest = &html[at + needle.len()..];
            &rest[..rest.find('"').unwrap()]
        })
        .collect()
}

/// The string of `var NAME = '...';` in the page's script.
fn script_constant<'a>(script: &'a str, name: &str) -> &'a str {
    let needle = format!("var {name} = '");
    let at = script.find(&needle).unwrap_or_else(|| panic!("no {name}")) + needle.len();
    &script[at..at + script[at..].find('\'').unwrap()]
}

fn dashboard(test: &TestRegistry) -> Dashboard {
    Dashboard::builder(test.registry().clone()).build()
}

#[test]
fn the_page_and_its_files_are_served_with_their_content_types() {
    let test = TestRegistry::new();
    let router = dashboard(&test).router();

    let page = get(&router, "/hystrix/dashboard/");
    assert_eq!(PAGE_PATH, "/hystrix/dashboard/");
    assert_eq!(page.status, StatusCode::OK);
    assert_eq!(page.content_type, "text/html; charset=utf-8");
    assert!(page.body.starts_with("<!doctype html>"), "{}", page.body);
    assert_eq!(
        page.headers["content-security-policy"],
        "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; \
         img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    );
    assert_eq!(page.headers["x-content-type-options"], "nosniff");
    assert_eq!(page.headers["cache-control"], "no-cache");

    let script = get(&router, "/hystrix/dashboard/dashboard.js");
    assert_eq!(
        (script.status, script.content_type.as_str()),
        (StatusCode::OK, "text/javascript; charset=utf-8")
    );
    assert!(script.body.contains("new EventSource(stream.url)"));
    let style = get(&router, "/hystrix/dashboard/dashboard.css");
    assert_eq!(
        (style.status, style.content_type.as_str()),
        (StatusCode::OK, "text/css; charset=utf-8")
    );
    assert!(style.body.contains(".tile"));
    // Files, not the page, are what the page names.
    assert_eq!(
        attribute_values(&page.body, "src"),
        ["dashboard.js"],
        "scripts"
    );

    // Without the slash: to the page, relative so it works nested.
    let bare = get(&router, "/hystrix/dashboard");
    assert_eq!(bare.status, StatusCode::TEMPORARY_REDIRECT);
    assert_eq!(bare.location.as_deref(), Some("dashboard/"));

    // A merged router keeps `/` for the app.
    assert_eq!(get(&router, "/").status, StatusCode::NOT_FOUND);
    assert_eq!(
        get(&router, "/hystrix/dashboard/nothing.js").status,
        StatusCode::NOT_FOUND
    );
}

#[test]
fn the_page_names_only_relative_urls() {
    let test = TestRegistry::new();
    let router = dashboard(&test).router();
    let page = get(&router, PAGE_PATH).body;
    let script = get(&router, "/hystrix/dashboard/dashboard.js").body;
    let style = get(&router, "/hystrix/dashboard/dashboard.css").body;

    let mut urls = attribute_values(&page, "src");
    urls.extend(attribute_values(&page, "href"));
    assert_eq!(urls, ["dashboard.js", "data:,", "dashboard.css"]);
    for name in ["STREAM_URL", "INFO_URL", "CIRCUIT_URL"] {
        urls.push(script_constant(&script, name));
    }
    for url in &urls {
        assert!(
            (!url.starts_with('/') && !url.contains("//") && !url.contains(':'))
                || *url == "data:,",
            "{url} is not relative"
        );
    }
    // No absolute URL anywhere, but the SVG namespace (a name, never fetched).
    let svg_namespace = "'http://www.w3.org/2000/svg'";
    assert_eq!(script.matches(svg_namespace).count(), 1);
    for (file, text) in [
        ("page", page.as_str()),
        ("script", &script.replace(svg_namespace, "")),
        ("style", style.as_str()),
    ] {
        for absolute in ["http:", "https:", "'//", "\"//", "url(", "@import"] {
            assert!(!text.contains(absolute), "{file} has {absolute}");
        }
    }
    // Every fetch goes through the constants, or to the stream being read (its own origin's,
    // checked when the page starts), to read why it was refused.
    assert_eq!(script.matches("fetch(").count(), 3);
    assert!(script.contains("fetch(INFO_URL"));
    assert!(script.contains("fetch(CIRCUIT_URL + encodeURIComponent(name)"));
    assert!(script.contains("fetch(stream.url"));
}

#[test]
fn the_info_endpoint_says_whether_the_breaker_buttons_show() {
    let test = TestRegistry::new();
    let registry = test.registry();
    let off = dashboard(&test).router();
    let loopback = Dashboard::builder(registry.clone()).admin().router();
    let token = Dashboard::builder(registry.clone())
        .admin_token(TOKEN)
        .unwrap()
        .router();
    for (router, body) in [
        (&off, r#"{"admin":null}"#),
        (&loopback, r#"{"admin":"loopback"}"#),
        (&token, r#"{"admin":"token"}"#),
    ] {
        let info = get(router, "/hystrix/dashboard/info");
        assert_eq!(info.status, StatusCode::OK);
        assert_eq!(info.content_type, "application/json");
        assert_eq!(info.headers["cache-control"], "no-cache, no-store");
        assert_eq!(info.body, body);
    }
    // Without admin routes the buttons would have nothing to call.
    semaphore_command(&test, "GetUser", "Users");
    let path = "/hystrix/admin/circuit/GetUser/force-open";
    assert_eq!(
        send(&off, Method::POST, path, Some(TOKEN)).status,
        StatusCode::NOT_FOUND
    );
    assert_eq!(
        send(&token, Method::POST, path, Some(TOKEN)).status,
        StatusCode::OK
    );
}

#[test]
fn nested_under_a_prefix_every_url_of_the_page_resolves() {
    let test = TestRegistry::new();
    semaphore_command(&test, "GetUser", "Users");
    let dashboard = Dashboard::builder(test.registry().clone())
        .admin_token(TOKEN)
        .unwrap()
        .build();
    let router: axum::Router = axum::Router::new().nest("/ops", dashboard.router());

    let page_path = format!("/ops{PAGE_PATH}");
    let page = get(&router, &page_path);
    assert_eq!(page.status, StatusCode::OK);
    let bare = get(&router, "/ops/hystrix/dashboard");
    assert_eq!(
        resolve("/ops/hystrix/", bare.location.as_deref().unwrap()),
        page_path
    );
    assert_eq!(get(&router, PAGE_PATH).status, StatusCode::NOT_FOUND);

    for file in attribute_values(&page.body, "src")
        .into_iter()
        .chain(attribute_values(&page.body, "href"))
        .filter(|url| !url.starts_with("data:"))
    {
        let path = resolve(&page_path, file);
        assert!(path.starts_with("/ops/hystrix/dashboard/"), "{path}");
        assert_eq!(get(&router, &path).status, StatusCode::OK, "{path}");
    }

    let script = get(&router, "/ops/hystrix/dashboard/dashboard.js").body;
    let stream = resolve(&page_path, script_constant(&script, "STREAM_URL"));
    assert_eq!(stream, "/ops/hystrix.stream");
    let answer = get(&router, &stream);
    assert_eq!(
        (answer.status, answer.content_type.as_str()),
        (StatusCode::OK, "text/event-stream;charset=UTF-8")
    );
    let info = resolve(&page_path, script_constant(&script, "INFO_URL"));
    assert_eq!(info, "/ops/hystrix/dashboard/info");
    assert_eq!(get(&router, &info).body, r#"{"admin":"token"}"#);

    let circuit = resolve(&page_path, script_constant(&script, "CIRCUIT_URL"));
    assert_eq!(circuit, "/ops/hystrix/admin/circuit/");
    let opened = send(
        &router,
        Method::POST,
        &format!("{circuit}GetUser/force-open"),
        Some(TOKEN),
    );
    assert_eq!(opened.status, StatusCode::OK);
    assert!(opened.body.contains(r#""isOpen":true"#), "{}", opened.body);
    assert!(
        test.registry()
            .circuit_breaker("GetUser")
            .unwrap()
            .is_open()
    );
}

#[test]
fn served_on_its_own_port_the_root_leads_to_the_page() {
    let test = TestRegistry::new();
    let dashboard = dashboard(&test);
    runtime().block_on(async {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(dashboard.serve_on(listener));
        let root = common::within(common::get(addr, "/")).await;
        assert_eq!(root.status, 307);
        assert_eq!(root.header("location"), Some("hystrix/dashboard/"));
        let page = common::within(common::get(addr, PAGE_PATH)).await;
        assert_eq!(page.status, 200);
        assert_eq!(
            page.header("content-type"),
            Some("text/html; charset=utf-8")
        );
        let body = common::within(page.body()).await;
        assert!(body.contains("<title>Hystrix dashboard</title>"), "{body}");
    });
}

/// The page reads `?stream=PATH` (e.g. a Turbine's `/turbine.stream?cluster=demo`) from its own
/// origin only: the script compares the origins and shows a refusal, the Content-Security-Policy
/// allows connections to the page's origin only (so even a script bug opens no other), and
/// the page with such a query is the same page.
#[test]
fn the_page_reads_another_stream_of_its_own_origin_only() {
    let test = TestRegistry::new();
    let router = dashboard(&test).router();
    let page = get(&router, PAGE_PATH);
    let pointed = get(
        &router,
        "/hystrix/dashboard/?stream=/turbine.stream%3Fcluster%3Ddemo",
    );
    assert_eq!(pointed.status, StatusCode::OK);
    assert_eq!(pointed.body, page.body);
    assert_eq!(
        pointed.headers["content-security-policy"],
        page.headers["content-security-policy"]
    );
    assert!(
        page.headers["content-security-policy"]
            .to_str()
            .unwrap()
            .contains("connect-src 'self';")
    );

    let script = get(&router, "/hystrix/dashboard/dashboard.js").body;
    // The default stays the instance's own, relative to the page.
    assert_eq!(
        script_constant(&script, "STREAM_URL"),
        "../../hystrix.stream"
    );
    assert!(script.contains("new URLSearchParams(window.location.search).get('stream')"));
    assert!(script.contains("url.origin !== window.location.origin"));
    // One EventSource, on the chosen stream.
    assert_eq!(script.matches("new EventSource(").count(), 1);
    // The refusal is shown, in an alert the page has (hidden until then).
    assert!(
        page.body
            .contains(r#"<p id="stream-refused" class="stream-refused" role="alert" hidden></p>"#),
        "{}",
        page.body
    );
    assert!(script.contains("getElementById('stream-refused')"));
    assert!(
        page.body
            .contains(r#"<span id="stream-name" class="stream-name""#)
    );
}

/// What the script reads of a merged (Turbine) message: the hosts, Turbine's object of counts
/// for a value the hosts disagree on, and the removal of a tile no host reports.
#[test]
fn the_script_reads_merged_messages() {
    let test = TestRegistry::new();
    let router = dashboard(&test).router();
    let script = get(&router, "/hystrix/dashboard/dashboard.js").body;
    for needle in [
        "m.reportingHosts",
        "m.deleteData === 'true'",
        "removeTile(kind, m.name)",
        "open['true']",
        "open['false']",
        "'Open ' + openHosts + ' Closed ' + closedHosts",
        "'mixed ('",
        "'Hosts: '",
    ] {
        assert!(script.contains(needle), "the script lacks {needle}");
    }
    // Command and collapser properties are per host already (Turbine does not sum them): no
    // property value of theirs is divided by the hosts. Thread-pool properties are sums.
    for line in script.lines().filter(|l| l.contains("propertyValue_")) {
        let divided = line.contains("/ hosts");
        let pool = line.contains("propertyValue_queueSizeRejectionThreshold")
            || (line.contains("propertyValue_metricsRollingStatisticalWindowInMilliseconds")
                && line.contains("Math.floor"));
        assert!(
            !divided || pool,
            "divides a command property by the hosts: {line}"
        );
    }
}
