//! Environment variables as a source of dynamic properties; the mapping of names is described
//! in the [config module docs](crate::config#environment-variables).

use std::ffi::OsString;

use crate::config::source::Entry;
use crate::config::store::SourceId;
use crate::config::{LoadError, LoadReport, Origin, Properties, PropertyValue};
use crate::error::ConfigError;

/// The prefix of the shell-friendly variable names.
pub const ENV_PREFIX: &str = "HYSTRIX__";

/// The shell-friendly environment variable for a full property name: `HYSTRIX__` and the name
/// after `hystrix.` with each `.` written `__`.
///
/// ```
/// use hystrix::config::{env_var_name, property_name_of_env_var};
///
/// let name = "hystrix.threadpool.UserService.coreSize";
/// let var = env_var_name(name).unwrap();
/// assert_eq!(var, "HYSTRIX__threadpool__UserService__coreSize");
/// assert_eq!(property_name_of_env_var(&var).as_deref(), Some(name));
/// ```
///
/// Returns `None` for a name that does not start with `hystrix.`, or that the mapping cannot
/// carry back unchanged (it contains `__`, `_.`, `=` or NUL): set those verbatim.
pub fn env_var_name(full_name: &str) -> Option<String> {
    let rest = full_name.strip_prefix("hystrix.")?;
    if rest.is_empty() || rest.contains(['=', '\0']) {
        return None;
    }
    let var = format!("{ENV_PREFIX}{}", rest.replace('.', "__"));
    (property_name_of_env_var(&var).as_deref() == Some(full_name)).then_some(var)
}

/// The full property name an environment variable sets, if it is one of ours: a verbatim name
/// (`hystrix.…`) as it is, a shell-friendly one (`HYSTRIX__…`) with each `__` read as `.` (see
/// the [config module docs](crate::config#environment-variables)). `None` for any other
/// variable.
pub fn property_name_of_env_var(variable: &str) -> Option<String> {
    if variable.starts_with("hystrix.") {
        return Some(variable.to_owned());
    }
    let rest = variable.strip_prefix(ENV_PREFIX)?;
    (!rest.is_empty()).then(|| format!("hystrix.{}", rest.replace("__", ".")))
}

impl Properties {
    /// Loads the process environment as the environment source (see the [config module
    /// docs](crate::config#environment-variables) for the variable names), replacing the values
    /// it gave before.
    /// Its values rank above files and below run-time values in their layer.
    ///
    /// A variable whose name is not UTF-8 is never one of ours (property names are UTF-8): it
    /// is ignored like any other variable that is not ours, without a warning, even under our
    /// prefixes.
    ///
    /// # Errors
    /// As [`load_env_from`](Properties::load_env_from); also [`LoadError::Invalid`] for a
    /// variable of ours whose value is not UTF-8 (the value shown with each invalid sequence
    /// replaced by `U+FFFD`). Two variables for one property are a [`LoadError::Conflict`]
    /// first; the variables are taken in order of property name, then variable name, so the
    /// error is the same whatever the environment's order. On error nothing changes.
    pub fn load_env(&self) -> Result<LoadReport, LoadError> {
        let vars = std::env::vars_os().filter_map(|(name, value)| {
            // A name that is not UTF-8 cannot be one of ours.
            let name = name.into_string().ok()?;
            property_name_of_env_var(&name)?;
            Some((name, value))
        });
        self.load_vars(vars.map(|(name, value)| (name, value.into_string())))
    }

    /// Loads `vars` (name, value) as the environment source, replacing the values it gave
    /// before: [`load_env`](Properties::load_env) without touching the process environment.
    /// Variables that are not ours are ignored.
    ///
    /// ```
    /// use hystrix::{CommandKey, Registry};
    ///
    /// let registry = Registry::new();
    /// let report = registry.properties().load_env_from([
    ///     ("HYSTRIX__command__GetUser__execution__isolation__thread__timeoutInMilliseconds", "250"),
    ///     ("hystrix.threadpool.default.coreSize", "4"),
    ///     ("PATH", "/usr/bin"),
    /// ])?;
    /// assert_eq!(report.applied, 2);
    /// let key = CommandKey::new("GetUser")?;
    /// assert_eq!(registry.properties().command(&key).execution_timeout_in_milliseconds, 250);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// Unknown names under our prefixes are warnings in the report, with a did-you-mean
    /// suggestion when one is close.
    ///
    /// # Errors
    /// - [`LoadError::Invalid`] naming the variable and the property, for a value that does not
    ///   parse, is out of range or breaks a rule tying properties together (below), or a
    ///   per-key change of a fixed property of a key in use;
    /// - [`LoadError::Conflict`] if two variables set one property;
    /// - [`LoadError::Removal`] if dropping a value the environment gave before leaves such a
    ///   rule broken (a value set at run time relied on it, say).
    ///
    /// The rules tying properties together, each stated with its property in the field docs of
    /// [`CommandProperties`](crate::CommandProperties),
    /// [`ThreadPoolProperties`](crate::ThreadPoolProperties) and
    /// [`CollapserProperties`](crate::config::CollapserProperties): a `numBuckets` divides its
    /// window (`metrics.rollingStats.*`, `metrics.rollingPercentile.*`, `execution.throttle.*`);
    /// `metrics.healthSnapshot.intervalInMilliseconds` divides
    /// `metrics.rollingStats.timeInMilliseconds` into at most 1000 buckets;
    /// `circuitBreaker.halfOpen.successThreshold` is at most `permittedRequests`;
    /// `retry.backoff.maxInMilliseconds` is at least `initialInMilliseconds`;
    /// `execution.isolation.adaptive.initialLimit` lies within `minLimit` and `maxLimit`; the
    /// CRITICAL and NORMAL `execution.isolation.priority.*.reservedPercentage` add up to at most
    /// 100; `chaos.fault.ratePercentage` and `chaos.hang.ratePercentage` add up to at most 100,
    /// a hang rate above 0 needs `execution.timeout.enabled`, and `chaos.enabled` needs a
    /// registry that allows chaos. A thread pool also needs at least one thread (`coreSize`, or
    /// `maximumSize` with `allowMaximumSizeToDivergeFromCoreSize`).
    ///
    /// On error nothing changes.
    pub fn load_env_from<K, V>(
        &self,
        vars: impl IntoIterator<Item = (K, V)>,
    ) -> Result<LoadReport, LoadError>
    where
        K: AsRef<str>,
        V: AsRef<str>,
    {
        self.load_vars(
            vars.into_iter()
                .map(|(name, value)| (name.as_ref().to_owned(), Ok(value.as_ref().to_owned()))),
        )
    }

    fn load_vars(
        &self,
        vars: impl Iterator<Item = (String, Result<String, OsString>)>,
    ) -> Result<LoadReport, LoadError> {
        let mut vars: Vec<_> = vars
            .filter_map(|(variable, value)| {
                let name = property_name_of_env_var(&variable)?;
                Some((name, variable, value))
            })
            .collect();
        // The environment has no order: sort so that errors and reports are stable.
        vars.sort_by(|a, b| (&a.0, &a.1).cmp(&(&b.0, &b.1)));
        if let Some(pair) = vars.windows(2).find(|pair| pair[0].0 == pair[1].0) {
            return Err(LoadError::Conflict {
                name: pair[0].0.clone(),
                variables: [pair[0].1.clone(), pair[1].1.clone()],
            });
        }
        let entries = vars
            .into_iter()
            .map(|(name, variable, value)| {
                let origin = Origin::Environment { variable };
                match value {
                    Ok(value) => Ok(Entry::new(name, PropertyValue::Str(value), origin)),
                    Err(raw) => Err(LoadError::Invalid {
                        error: Box::new(ConfigError::InvalidValue {
                            name,
                            value: raw.to_string_lossy().into_owned(),
                            reason: "not valid UTF-8".into(),
                        }),
                        origin,
                    }),
                }
            })
            .collect::<Result<Vec<_>, _>>()?;
        self.load_entries(SourceId::Env, &entries)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shell_names_map_both_ways_and_keep_case() {
        let cases = [
            (
                "hystrix.command.default.execution.isolation.thread.timeoutInMilliseconds",
                Some(
                    "HYSTRIX__command__default__execution__isolation__thread__timeoutInMilliseconds",
                ),
            ),
            (
                "hystrix.command.svc.users.GetUser.fallback.enabled",
                Some("HYSTRIX__command__svc__users__GetUser__fallback__enabled"),
            ),
            (
                "hystrix.config.stream.maxConcurrentConnections",
                Some("HYSTRIX__config__stream__maxConcurrentConnections"),
            ),
            (
                "hystrix.threadpool.get_user.coreSize",
                Some("HYSTRIX__threadpool__get_user__coreSize"),
            ),
            // `_` just before a `.`, or `__`, would not come back unchanged: verbatim only.
            ("hystrix.threadpool.user_.coreSize", None),
            (
                "hystrix.threadpool._user.coreSize",
                Some("HYSTRIX__threadpool___user__coreSize"),
            ),
            ("hystrix.threadpool.a__b.coreSize", None),
            ("ribbon.ReadTimeout", None),
        ];
        for (name, var) in cases {
            assert_eq!(env_var_name(name).as_deref(), var, "{name}");
            if let Some(var) = var {
                assert_eq!(property_name_of_env_var(var).as_deref(), Some(name));
            }
        }
        assert_eq!(property_name_of_env_var("HYSTRIX__"), None);
        assert_eq!(property_name_of_env_var("HYSTRIX_PORT"), None);
        assert_eq!(
            property_name_of_env_var("hystrix.command.A.fallback.enabled").as_deref(),
            Some("hystrix.command.A.fallback.enabled")
        );
    }
}
