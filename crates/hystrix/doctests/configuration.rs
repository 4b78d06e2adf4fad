//! The setup of the Rust snippets of docs/configuration.md (see crates/hystrix/doctests/generate.rs):
//! one section per snippet, named by its `<!-- doctest: NAME -->` line; `// [snippet]` is
//! where the snippet goes. The common prelude is `prelude.rs`, then the helpers below.

/// The page's example file, as /etc/user-service/hystrix.properties.
const USER_SERVICE_PROPERTIES: &str = "\
# /etc/user-service/hystrix.properties
hystrix.command.default.execution.isolation.thread.timeoutInMilliseconds=1000
hystrix.command.GetUser.execution.isolation.thread.timeoutInMilliseconds=250
hystrix.command.GetUser.circuitBreaker.errorThresholdPercentage=40
hystrix.threadpool.UserService.coreSize=20
ribbon.ReadTimeout=3000
";

/// Writes `text` to a new file `name` in a folder of the snippet's own under the temporary
/// folder.
fn temp_file(snippet: &str, name: &str, text: &str) -> std::io::Result<std::path::PathBuf> {
    let dir = std::env::temp_dir().join(format!(
        "hystrix-doctest-{snippet}-{}",
        std::process::id()
    ));
    std::fs::create_dir_all(&dir)?;
    let path = dir.join(name);
    std::fs::write(&path, text)?;
    Ok(path)
}

// doctest: precedence
fn main() -> Result<(), Box<dyn std::error::Error>> {
    // [snippet]
    let report = properties.explain(&format!("hystrix.command.GetUser.{timeout}"))?;
    assert_eq!(report.overridden[0].value, Some(PropertyValue::Int(800)));
    Ok(())
}

// doctest: load-file
fn main() -> Result<(), Box<dyn std::error::Error>> {
    let path = temp_file("load-file", "hystrix.properties", USER_SERVICE_PROPERTIES)?;
    // [snippet]
    assert!(report.warnings.is_empty());
    let pool = registry
        .properties()
        .thread_pool(&ThreadPoolKey::new("UserService")?);
    assert_eq!(pool.core_size, 20);
    std::fs::remove_dir_all(path.parent().expect("a folder"))?;
    Ok(())
}

// doctest: environment
fn main() -> Result<(), Box<dyn std::error::Error>> {
    // [snippet]
    let properties = registry.properties();
    assert_eq!(
        properties
            .thread_pool(&ThreadPoolKey::new("UserService")?)
            .core_size,
        20
    );
    assert!(!properties.command(&CommandKey::new("GetUser")?).fallback_enabled);
    let err = properties
        .load_env_from([
            ("HYSTRIX__command__GetUser__fallback__enabled", "true"),
            ("hystrix.command.GetUser.fallback.enabled", "false"),
        ])
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "`hystrix.command.GetUser.fallback.enabled` is set by two environment variables, \
         HYSTRIX__command__GetUser__fallback__enabled and \
         hystrix.command.GetUser.fallback.enabled: keep one"
    );
    Ok(())
}

// doctest: validation
fn main() -> Result<(), Box<dyn std::error::Error>> {
    let registry = Registry::new();
    let bad_file = temp_file(
        "validation",
        "bad.properties",
        "hystrix.threadpool.UserService.maxQueueSize=10\n\
         hystrix.threadpool.UserService.coreSize=0\n",
    )?;
    // [snippet]
    // Nothing changed: the default stays.
    let pool = properties.thread_pool(&ThreadPoolKey::new("UserService")?);
    assert_eq!((pool.core_size, pool.max_queue_size), (10, -1));
    std::fs::remove_dir_all(bad_file.parent().expect("a folder"))?;
    Ok(())
}

// doctest: explain
fn main() -> Result<(), Box<dyn std::error::Error>> {
    let path = temp_file("explain", "hystrix.properties", USER_SERVICE_PROPERTIES)?;
    let registry = Registry::new();
    let _get_user = Command::builder("GetUser")
        .group("UserService")
        .timeout(Duration::from_millis(800))
        .build_in(&registry)?;
    registry.properties().load_file(&path)?;
    // [snippet]
    let hidden: Vec<_> = report
        .overridden
        .iter()
        .map(|value| (value.value.clone(), value.layer))
        .collect();
    assert_eq!(
        hidden,
        [
            (Some(PropertyValue::Int(800)), PropertyLayer::Builder),
            (Some(PropertyValue::Int(1000)), PropertyLayer::GlobalDefault),
            (Some(PropertyValue::Int(1000)), PropertyLayer::CodeDefault),
        ]
    );
    std::fs::remove_dir_all(path.parent().expect("a folder"))?;
    Ok(())
}

// doctest: hot-reload feature=reload
fn main() -> Result<(), Box<dyn std::error::Error>> {
    let path = temp_file("hot-reload", "hystrix.properties", USER_SERVICE_PROPERTIES)?;
    let registry = Registry::new();
    let get_user = Command::builder("GetUser")
        .group("UserService")
        .build_in(&registry)?;
    let timeout = "execution.isolation.thread.timeoutInMilliseconds";
    // [snippet]
    std::fs::remove_dir_all(path.parent().expect("a folder"))?;
    Ok(())
}
