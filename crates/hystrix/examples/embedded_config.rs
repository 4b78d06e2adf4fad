//! Hystrix properties in the `[hystrix]` section of an application's own settings file, read
//! with figment and serde along with the application's other settings.
//!
//! Run with `cargo run --features serde --example embedded_config`.
//!
//! The settings file (written to a temporary folder, as an application would read its
//! `settings.toml`) gives the `GetUser` command a 50 ms timeout, over the 1 000 ms its builder
//! asks for. A call to a slow "user service" (150 ms) is answered by the fallback at 50 ms; then
//! the section is reloaded with a 400 ms timeout and the same call succeeds. `explain` shows
//! where each value came from. A value out of range in the settings fails the extraction,
//! naming the property.

use std::thread;
use std::time::Duration;

use figment::Figment;
use figment::providers::{Format, Toml};
use hystrix::config::PropertiesSection;
use hystrix::{Command, Registry};

/// The application's settings: its own, and the Hystrix section.
#[derive(Debug, serde::Deserialize)]
struct Settings {
    listen: String,
    user_service_url: String,
    #[serde(default)]
    hystrix: PropertiesSection,
}

const SETTINGS: &str = r#"
listen = "127.0.0.1:8080"
user_service_url = "http://users.internal"

[hystrix.command.GetUser]
execution.isolation.thread.timeoutInMilliseconds = 50
circuitBreaker.requestVolumeThreshold = "5"        # strings work, as from the environment

[hystrix.threadpool.UserService]
coreSize = 4
"#;

const TIMEOUT: &str = "hystrix.command.GetUser.execution.isolation.thread.timeoutInMilliseconds";

fn read_settings(path: &std::path::Path) -> Result<Settings, Box<figment::Error>> {
    Ok(Figment::new().merge(Toml::file(path)).extract()?)
}

/// The slow dependency: 150 ms for every user.
fn fetch_user(id: u32) -> Result<String, std::io::Error> {
    thread::sleep(Duration::from_millis(150));
    Ok(format!("user-{id}"))
}

fn call(get_user: &Command, id: u32) -> String {
    let outcome = get_user
        .run(move || fetch_user(id))
        .fallback(|_err| Ok::<_, std::io::Error>("anonymous".to_owned()))
        .execute_outcome();
    let events = outcome.execution_result().execution_events();
    match outcome.into_response() {
        Ok(name) => format!("{name} {events:?}"),
        Err(err) => format!("error: {err}"),
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = std::env::temp_dir().join(format!("hystrix-embedded-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let path = dir.join("settings.toml");
    std::fs::write(&path, SETTINGS)?;

    let settings = read_settings(&path)?;
    println!(
        "settings: listen on {}, users at {}, {} Hystrix values",
        settings.listen,
        settings.user_service_url,
        settings.hystrix.len()
    );
    let registry = Registry::new();
    let report = registry
        .properties()
        .load_section("settings.toml [hystrix]", &settings.hystrix)?;
    println!("loaded {} values: {:?}", report.applied, report.changed);

    let get_user = Command::builder("GetUser")
        .group("UserService")
        .timeout(Duration::from_millis(1000))
        .build_in(&registry)?;
    let explained = registry.properties().explain(TIMEOUT)?;
    println!(
        "timeout {} ms from {} (over {} ms from the {})",
        get_user.properties().execution_timeout_in_milliseconds,
        explained.origin,
        explained.overridden[0]
            .value
            .as_ref()
            .map_or_else(|| "-".to_owned(), ToString::to_string),
        explained.overridden[0].layer,
    );
    let first = call(&get_user, 1);
    println!("call 1: {first}");

    // The operator raises the timeout; the application reloads its settings.
    std::fs::write(&path, SETTINGS.replace("= 50", "= 400"))?;
    let settings = read_settings(&path)?;
    let report = registry
        .properties()
        .load_section("settings.toml [hystrix]", &settings.hystrix)?;
    println!("reloaded: {:?} changed", report.changed);
    let second = call(&get_user, 2);
    println!(
        "call 2: {second} (timeout now {} ms)",
        get_user.properties().execution_timeout_in_milliseconds
    );

    // An invalid value fails the extraction, naming the property; nothing is loaded.
    std::fs::write(
        &path,
        SETTINGS.replace("coreSize = 4", "coreSize = \"four\""),
    )?;
    let refused = read_settings(&path).map(drop);
    match &refused {
        Err(err) => println!("invalid settings refused: {}", err.kind),
        Ok(()) => println!("invalid settings were accepted"),
    }
    std::fs::remove_dir_all(&dir)?;

    if !first.starts_with("anonymous") || !second.starts_with("user-2") || refused.is_ok() {
        return Err("the section's values did not take effect as expected".into());
    }
    Ok(())
}
