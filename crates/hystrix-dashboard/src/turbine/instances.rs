//! Where a cluster's instances are: a static list of stream URLs, a file of them re-read,
//! or a DNS name resolved again and again.

use std::collections::BTreeSet;
use std::fmt;
use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

use axum::http::Uri;

use super::TurbineError;

/// Instances a cluster holds at most; past it, the rest of a list, file or DNS answer is
/// ignored (with a warning), so that a runaway file cannot exhaust memory.
pub const MAX_INSTANCES: usize = 1024;

/// The shortest re-read interval [`Instances::file`] and [`Instances::dns`] take (a shorter
/// one is raised to it).
const MIN_REREAD: Duration = Duration::from_millis(10);

/// One instance's stream: `http://host:port/path?query`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct InstanceUrl {
    host: String,
    port: u16,
    path: String,
}

impl InstanceUrl {
    /// Parses `http://host[:port]/path[?query]` (port 80 when absent; `/hystrix.stream` when
    /// the path is empty or `/`).
    ///
    /// # Errors
    /// [`TurbineError::InvalidUrl`] for anything else (another scheme, no host, user info).
    pub fn parse(text: &str) -> Result<InstanceUrl, TurbineError> {
        let invalid = |reason: &str| TurbineError::InvalidUrl {
            url: text.to_owned(),
            reason: reason.to_owned(),
        };
        let uri: Uri = text
            .trim()
            .parse()
            .map_err(|err: axum::http::uri::InvalidUri| invalid(&err.to_string()))?;
        match uri.scheme_str() {
            Some("http") => {}
            Some(other) => {
                return Err(invalid(&format!(
                    "scheme `{other}` is not supported (plain http only)"
                )));
            }
            None => return Err(invalid("no scheme: write http://host:port/hystrix.stream")),
        }
        let authority = uri.authority().ok_or_else(|| invalid("no host"))?;
        if authority.as_str().contains('@') {
            return Err(invalid("user info is not supported"));
        }
        let host = authority
            .host()
            .trim_start_matches('[')
            .trim_end_matches(']');
        if host.is_empty() {
            return Err(invalid("no host"));
        }
        // The port as written (after an IPv6 address's brackets), if any.
        let raw = authority.as_str();
        let after_host = raw.rsplit_once(']').map_or(raw, |(_, rest)| rest);
        let port = match after_host.rsplit_once(':') {
            None => 80,
            Some((_, port)) => match port.parse::<u16>() {
                Ok(port) if port > 0 => port,
                _ => return Err(invalid("the port must be from 1 to 65535")),
            },
        };
        let path = match uri.path_and_query().map(|p| p.as_str()) {
            None | Some("") | Some("/") => "/hystrix.stream".to_owned(),
            Some(path) => path.to_owned(),
        };
        Ok(InstanceUrl {
            host: host.to_owned(),
            port,
            path,
        })
    }

    /// The host (a name or an address, without brackets).
    pub fn host(&self) -> &str {
        &self.host
    }

    /// The port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The path and query asked for.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// The same URL with `ip` for its host.
    fn with_ip(&self, ip: IpAddr) -> InstanceUrl {
        InstanceUrl {
            host: ip.to_string(),
            port: self.port,
            path: self.path.clone(),
        }
    }

    /// The `Host` header's value.
    pub(crate) fn authority(&self) -> String {
        if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }
}

impl fmt::Display for InstanceUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "http://{}{}", self.authority(), self.path)
    }
}

/// Where a cluster's instances are found (as Turbine's instance discovery).
#[derive(Debug, Clone)]
pub struct Instances(pub(crate) Source);

#[derive(Debug, Clone)]
pub(crate) enum Source {
    List(Vec<InstanceUrl>),
    File { path: PathBuf, every: Duration },
    Dns { url: InstanceUrl, every: Duration },
}

impl Instances {
    /// A fixed list of stream URLs (`http://host:port/hystrix.stream`), duplicates removed.
    ///
    /// # Errors
    /// [`TurbineError::InvalidUrl`] naming the first bad URL; [`TurbineError::TooManyInstances`]
    /// past [`MAX_INSTANCES`].
    pub fn list<I, S>(urls: I) -> Result<Instances, TurbineError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let mut set = BTreeSet::new();
        for url in urls {
            set.insert(InstanceUrl::parse(url.as_ref())?);
            if set.len() > MAX_INSTANCES {
                return Err(TurbineError::TooManyInstances);
            }
        }
        Ok(Instances(Source::List(set.into_iter().collect())))
    }

    /// The stream URLs listed in the file at `path`, one per line (blank lines and lines
    /// starting with `#` skipped), read when the cluster's stream starts and again every
    /// `every` (at least 10 ms): an instance added to the file is read from, one removed is
    /// dropped. A line that is not a URL is skipped with a warning; a file that cannot be read
    /// keeps the instances read last (with a warning). Replace the file at once (write a new
    /// one and rename it over the old): one caught half written drops the missing instances
    /// until the next read.
    pub fn file(path: impl Into<PathBuf>, every: Duration) -> Instances {
        Instances(Source::File {
            path: path.into(),
            every: every.max(MIN_REREAD),
        })
    }

    /// Every address the host of `url` resolves to (the system resolver, as
    /// `tokio::net::lookup_host`), each an instance at the URL's port and path, resolved when
    /// the cluster's stream starts and again every `every` (at least 10 ms). A failed lookup
    /// keeps the instances resolved last (with a warning).
    ///
    /// # Errors
    /// [`TurbineError::InvalidUrl`] for a bad URL.
    pub fn dns(url: &str, every: Duration) -> Result<Instances, TurbineError> {
        Ok(Instances(Source::Dns {
            url: InstanceUrl::parse(url)?,
            every: every.max(MIN_REREAD),
        }))
    }
}

impl Source {
    /// How often the instances are looked for again (`None`: never, a fixed list).
    pub(crate) fn every(&self) -> Option<Duration> {
        match self {
            Source::List(_) => None,
            Source::File { every, .. } | Source::Dns { every, .. } => Some(*every),
        }
    }

    /// The instances now, or `None` when they cannot be read (keep the last ones).
    pub(crate) async fn resolve(&self, cluster: &str) -> Option<Vec<InstanceUrl>> {
        match self {
            Source::List(urls) => Some(urls.clone()),
            Source::File { path, .. } => match tokio::fs::read_to_string(path).await {
                Ok(text) => Some(parse_file(&text, cluster)),
                Err(err) => {
                    tracing::warn!(
                        target: "hystrix::turbine",
                        "turbine cluster {cluster}: cannot read {}: {err}; keeping its instances",
                        path.display()
                    );
                    None
                }
            },
            Source::Dns { url, .. } => {
                match tokio::net::lookup_host((url.host.as_str(), url.port)).await {
                    Ok(addrs) => {
                        let set: BTreeSet<InstanceUrl> =
                            addrs.map(|addr| url.with_ip(addr.ip())).collect();
                        Some(set.into_iter().take(MAX_INSTANCES).collect())
                    }
                    Err(err) => {
                        tracing::warn!(
                            target: "hystrix::turbine",
                            "turbine cluster {cluster}: cannot resolve {}: {err}; keeping its instances",
                            url.host
                        );
                        None
                    }
                }
            }
        }
    }
}

/// The URLs of an instances file.
fn parse_file(text: &str, cluster: &str) -> Vec<InstanceUrl> {
    let mut set = BTreeSet::new();
    for (number, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        match InstanceUrl::parse(line) {
            Ok(url) if set.len() < MAX_INSTANCES => {
                set.insert(url);
            }
            Ok(_) => {
                tracing::warn!(
                    target: "hystrix::turbine",
                    "turbine cluster {cluster}: more than {MAX_INSTANCES} instances; line {} and the rest ignored",
                    number + 1
                );
                break;
            }
            Err(err) => tracing::warn!(
                target: "hystrix::turbine",
                "turbine cluster {cluster}: line {} skipped: {err}",
                number + 1
            ),
        }
    }
    set.into_iter().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_parse_with_defaults_and_refuse_what_is_not_plain_http() {
        let url = InstanceUrl::parse("http://10.0.0.1:8080/hystrix.stream").expect("valid");
        assert_eq!(
            (url.host(), url.port(), url.path()),
            ("10.0.0.1", 8080, "/hystrix.stream")
        );
        let url = InstanceUrl::parse("http://gateway").expect("valid");
        assert_eq!(
            (url.host(), url.port(), url.path()),
            ("gateway", 80, "/hystrix.stream")
        );
        let url = InstanceUrl::parse("http://[::1]:9/s?delay=1").expect("valid");
        assert_eq!(url.to_string(), "http://[::1]:9/s?delay=1");
        for bad in [
            "https://a/s",
            "a:80/s",
            "http://u:p@a/s",
            "",
            "http:///s",
            "http://a:99999/s",
            "http://a:65536/s",
            "http://a:0/s",
        ] {
            let err = InstanceUrl::parse(bad).expect_err(bad);
            assert!(
                matches!(err, TurbineError::InvalidUrl { .. }),
                "{bad}: {err}"
            );
        }
    }

    #[test]
    fn a_file_lists_urls_and_skips_comments_and_bad_lines() {
        let urls = parse_file(
            "# the demo\nhttp://127.0.0.1:1/hystrix.stream\n\n  http://127.0.0.1:2  \nnot a url\nhttp://127.0.0.1:1/hystrix.stream\n",
            "c",
        );
        let text: Vec<String> = urls.iter().map(ToString::to_string).collect();
        assert_eq!(
            text,
            [
                "http://127.0.0.1:1/hystrix.stream",
                "http://127.0.0.1:2/hystrix.stream"
            ]
        );
    }
}
