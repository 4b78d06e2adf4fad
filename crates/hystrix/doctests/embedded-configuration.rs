//! The setup of the Rust snippets of docs/embedded-configuration.md (see
//! crates/hystrix/doctests/generate.rs): one section per snippet, named by its
//! `<!-- doctest: NAME -->` line; `// [snippet]` is where the snippet goes. The common prelude is
//! `prelude.rs`, then the helpers below. Every snippet needs the feature `serde` (and the
//! dev-dependencies figment and config).

use figment::providers::{Format, Toml};
use figment::Figment;
use hystrix::config::PropertiesSection;

/// The page's settings.toml.
const SETTINGS: &str = r#"
listen = "0.0.0.0:8080"

[hystrix.command.default]
execution.isolation.thread.timeoutInMilliseconds = 1000

[hystrix.command.GetUser]
execution.isolation.thread.timeoutInMilliseconds = 250
circuitBreaker.errorThresholdPercentage = "40"

[hystrix.command."svc.users.GetProfile"]
fallback.enabled = false

[hystrix.threadpool.UserService]
coreSize = 20
"#;

/// The application's settings, as the page's first snippet defines them.
#[derive(Debug, serde::Deserialize)]
struct Settings {
    listen: String,
    #[serde(default)]
    hystrix: PropertiesSection,
}

/// `text` as settings.toml in a folder of the snippet's own under the temporary folder.
fn settings_file(snippet: &str, text: &str) -> std::io::Result<std::path::PathBuf> {
    let dir = std::env::temp_dir().join(format!("hystrix-embedded-{snippet}-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let path = dir.join("settings.toml");
    std::fs::write(&path, text)?;
    Ok(path)
}

/// A registry with the page's settings loaded.
fn loaded(path: &std::path::Path) -> Result<Registry, Box<dyn std::error::Error>> {
    let settings: Settings = Figment::new().merge(Toml::file(path)).extract()?;
    let registry = Registry::new();
    registry
        .properties()
        .load_section("settings.toml [hystrix]", &settings.hystrix)?;
    Ok(registry)
}

// doctest: embedded-figment feature=serde
fn main() -> Result<(), Box<dyn std::error::Error>> {
    let path = settings_file("figment", SETTINGS)?;
    // [snippet]
    assert_eq!(settings.listen, "0.0.0.0:8080");
    let user = registry.properties().command(&CommandKey::new("GetUser")?);
    assert_eq!(user.execution_timeout_in_milliseconds, 250);
    assert_eq!(user.circuit_breaker_error_threshold_percentage, 40);
    std::fs::remove_dir_all(path.parent().expect("a folder"))?;
    Ok(())
}

// doctest: embedded-config-rs feature=serde
fn main() -> Result<(), Box<dyn std::error::Error>> {
    let path = settings_file("config-rs", SETTINGS)?;
    let registry = Registry::new();
    // [snippet]
    let pool = registry
        .properties()
        .thread_pool(&ThreadPoolKey::new("UserService")?);
    assert_eq!(pool.core_size, 20);
    let profile = registry
        .properties()
        .command(&CommandKey::new("svc.users.GetProfile")?);
    assert!(!profile.fallback_enabled);
    std::fs::remove_dir_all(path.parent().expect("a folder"))?;
    Ok(())
}

// doctest: embedded-explain feature=serde
fn main() -> Result<(), Box<dyn std::error::Error>> {
    let path = settings_file("explain", SETTINGS)?;
    let registry = loaded(&path)?;
    // [snippet]
    std::fs::remove_dir_all(path.parent().expect("a folder"))?;
    Ok(())
}

// doctest: embedded-errors feature=serde
fn main() -> Result<(), Box<dyn std::error::Error>> {
    // [snippet]
    Ok(())
}

// doctest: embedded-strict feature=serde
fn main() -> Result<(), Box<dyn std::error::Error>> {
    let settings: Settings = Figment::new()
        .merge(Toml::string(
            "listen = ':80'\n[hystrix.command.GetUser]\n\
             execution.isolation.thread.timeoutInMiliseconds = 250\n",
        ))
        .extract()?;
    // [snippet]
    Ok(())
}

// doctest: embedded-reload feature=serde
fn main() -> Result<(), Box<dyn std::error::Error>> {
    let path = settings_file("reload", SETTINGS)?;
    let registry = loaded(&path)?;
    let get_user = Command::builder("GetUser")
        .group("UserService")
        .build_in(&registry)?;
    assert_eq!(get_user.properties().execution_timeout_in_milliseconds, 250);
    // [snippet]
    std::fs::remove_dir_all(path.parent().expect("a folder"))?;
    Ok(())
}
