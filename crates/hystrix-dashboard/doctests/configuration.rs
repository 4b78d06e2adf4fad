//! The setup of the Rust snippets of docs/configuration.md (see crates/hystrix/doctests/generate.rs):
//! one section per snippet, named by its `<!-- doctest: NAME -->` line; `// [snippet]` is
//! where the snippet goes. The common prelude is `prelude.rs`.

// doctest: admin-endpoint
/// The changes the admin endpoint reported.
static CHANGES: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());

fn audit_log(change: &hystrix_dashboard::admin::AdminChange) {
    CHANGES.lock().unwrap().push(format!("{:?}", change.action));
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // SAFETY: the test's only thread.
    unsafe {
        std::env::set_var(
            "HYSTRIX_ADMIN_TOKEN",
            "a-long-enough-admin-token-for-the-test",
        )
    };
    let registry = Registry::new();
    let changes = &CHANGES;
    // [snippet]
    let runtime = tokio::runtime::Builder::new_current_thread().build()?;
    let name = "hystrix.command.GetUser.execution.isolation.thread.timeoutInMilliseconds";
    let put = |token: &str, value: &str| {
        axum::http::Request::put(format!("/hystrix/admin/config/properties/{name}"))
            .header("Authorization", format!("Bearer {token}"))
            .body(axum::body::Body::from(value.to_owned()))
    };
    let call = |request: axum::http::Request<axum::body::Body>| {
        runtime.block_on(async {
            let response = ::tower::ServiceExt::oneshot(dashboard.router::<()>(), request).await?;
            let status = response.status().as_u16();
            let body = axum::body::to_bytes(response.into_body(), 64 * 1024).await?;
            Ok::<_, Box<dyn std::error::Error>>((status, String::from_utf8(body.to_vec())?))
        })
    };
    let token = std::env::var("HYSTRIX_ADMIN_TOKEN")?;
    // A change with the token applies, and is told to on_admin_change.
    assert_eq!(call(put(&token, "500")?)?.0, 200);
    let timeout = registry
        .properties()
        .command(&CommandKey::new("GetUser")?)
        .execution_timeout_in_milliseconds;
    assert_eq!(timeout, 500);
    assert_eq!(changes.lock().unwrap().len(), 1);
    // A refused one names the property and changes nothing; no token: 401.
    let (status, body) = call(put(&token, "0")?)?;
    assert_eq!(status, 400);
    assert!(body.contains(name), "{body}");
    assert_eq!(call(put("wrong-token-wrong-token-wrong-token", "700")?)?.0, 401);
    assert_eq!(changes.lock().unwrap().len(), 1);
    Ok(())
}

