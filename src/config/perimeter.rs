//! The server's perimeter (docs/configuration.md, "Perimeter"): which web origins and host
//! names may reach it, how long a connection may sit idle or half-sent, how many
//! connections it keeps, and how long a dashboard session lasts.

use std::net::IpAddr;
use std::time::Duration;

use super::{ConfigError, FileConfig, ServeArgs, invalid};

/// A web origin (RFC 6454): scheme, host and port, the port filled in when the
/// text leaves it to the scheme. Compared whole, host case-insensitively.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebOrigin {
    https: bool,
    /// Lower case; an IPv6 address keeps its brackets.
    host: String,
    port: u16,
}

impl WebOrigin {
    /// `http://host[:port]` or `https://host[:port]`, nothing after the authority
    /// (browsers send exactly this as `Origin`). `None` for anything else, `null`
    /// included.
    pub fn parse(text: &str) -> Option<Self> {
        // The scheme is case-insensitive (RFC 3986 §3.1).
        let (scheme, authority) = text.split_once("://")?;
        let https = if scheme.eq_ignore_ascii_case("https") {
            true
        } else if scheme.eq_ignore_ascii_case("http") {
            false
        } else {
            return None;
        };
        let (host, port) = HostPort::split(authority)?;
        let default_port = if https { 443 } else { 80 };
        Some(WebOrigin {
            https,
            host,
            port: port.unwrap_or(default_port),
        })
    }

    /// `http://host:port`: the origin of a page this server serves itself.
    pub fn http(host: &str, port: u16) -> Self {
        WebOrigin {
            https: false,
            host: host.to_ascii_lowercase(),
            port,
        }
    }
}

impl std::fmt::Display for WebOrigin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let scheme = if self.https { "https" } else { "http" };
        write!(f, "{scheme}://{}:{}", self.host, self.port)
    }
}

/// The host name of a `Host` header or an origin's authority, and its port if it
/// names one.
pub struct HostPort;

impl HostPort {
    /// `name`, `name:port`, `[v6]` or `[v6]:port`; the name lower-cased, without a
    /// trailing dot. `None` when it is empty or holds anything a host cannot.
    pub fn split(authority: &str) -> Option<(String, Option<u16>)> {
        let (host, port) = if authority.starts_with('[') {
            let end = authority.find(']')?;
            let (host, rest) = authority.split_at(end + 1);
            match rest {
                "" => (host, None),
                _ => (host, Some(rest.strip_prefix(':')?)),
            }
        } else {
            match authority.rsplit_once(':') {
                Some((host, port)) => (host, Some(port)),
                None => (authority, None),
            }
        };
        let port = match port {
            None => None,
            Some(p) => Some(p.parse::<u16>().ok()?),
        };
        let host = host.strip_suffix('.').unwrap_or(host).to_ascii_lowercase();
        let bracketed = host.starts_with('[');
        let allowed = |b: u8| {
            b.is_ascii_alphanumeric()
                || matches!(b, b'-' | b'.' | b'_')
                || (bracketed && matches!(b, b'[' | b']' | b':'))
        };
        if host.is_empty() || !host.bytes().all(allowed) {
            return None;
        }
        Some((host, port))
    }

    /// Whether `host` (as [`HostPort::split`] answers it) always means this machine.
    pub fn is_loopback(host: &str) -> bool {
        if host == "localhost" {
            return true;
        }
        let bare = host.trim_start_matches('[').trim_end_matches(']');
        bare.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
    }
}

/// A host name the server answers to on a loopback bind besides the loopback
/// names, with the one port it must come with if the entry names one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AllowedHost {
    pub host: String,
    pub port: Option<u16>,
}

impl AllowedHost {
    pub fn matches(&self, host: &str, port: Option<u16>) -> bool {
        self.host == host && (self.port.is_none() || self.port == port)
    }
}

/// Default header-read timeout: a client has this long to send a request's head.
pub const DEFAULT_HEADER_READ_TIMEOUT_SECS: u64 = 10;
/// Default idle timeout: a keep-alive connection with no request is closed after it.
pub const DEFAULT_IDLE_TIMEOUT_SECS: u64 = 60;
/// Default dashboard session lifetime: a working day.
pub const DEFAULT_SESSION_TTL_SECS: u64 = 12 * 3600;

/// The perimeter settings, checked.
#[derive(Debug, Clone)]
pub struct PerimeterSettings {
    /// Origins allowed besides the server's own (`http://127.0.0.1:PORT`, …).
    pub allowed_origins: Vec<WebOrigin>,
    /// Host names allowed on a loopback bind besides the loopback names.
    pub allowed_hosts: Vec<AllowedHost>,
    pub header_read_timeout: Duration,
    pub idle_timeout: Duration,
    /// `None`: derived from the file-descriptor limit at start.
    pub max_connections: Option<usize>,
    pub session_ttl: Duration,
}

impl Default for PerimeterSettings {
    fn default() -> Self {
        PerimeterSettings {
            allowed_origins: Vec::new(),
            allowed_hosts: Vec::new(),
            header_read_timeout: Duration::from_secs(DEFAULT_HEADER_READ_TIMEOUT_SECS),
            idle_timeout: Duration::from_secs(DEFAULT_IDLE_TIMEOUT_SECS),
            max_connections: None,
            session_ttl: Duration::from_secs(DEFAULT_SESSION_TTL_SECS),
        }
    }
}

/// A comma-separated variable or the file's array, as one list of entries.
fn entries(from_args: &Option<String>, from_file: &Option<Vec<String>>) -> Vec<String> {
    match from_args {
        Some(list) => list
            .split(',')
            .map(str::trim)
            .filter(|e| !e.is_empty())
            .map(str::to_owned)
            .collect(),
        None => from_file.clone().unwrap_or_default(),
    }
}

impl PerimeterSettings {
    pub fn merge(args: &ServeArgs, file: &FileConfig) -> Result<Self, ConfigError> {
        let allowed_origins = entries(&args.allowed_origins, &file.allowed_origins)
            .iter()
            .map(|entry| {
                WebOrigin::parse(entry.trim_end_matches('/')).ok_or_else(|| {
                    invalid(
                        "PLANGATE_ALLOWED_ORIGINS",
                        format!(
                            "{entry:?} is not an origin like https://plangate.example.com or \
                             http://localhost:3000"
                        ),
                    )
                })
            })
            .collect::<Result<_, _>>()?;
        let allowed_hosts = entries(&args.allowed_hosts, &file.allowed_hosts)
            .iter()
            .map(|entry| {
                HostPort::split(entry)
                    .map(|(host, port)| AllowedHost { host, port })
                    .ok_or_else(|| {
                        invalid(
                            "PLANGATE_ALLOWED_HOSTS",
                            format!(
                                "{entry:?} is not a host name like plangate.internal or \
                                 plangate.internal:8080"
                            ),
                        )
                    })
            })
            .collect::<Result<_, _>>()?;
        let seconds =
            |name: &'static str, value: Option<u64>, default: u64| match value.unwrap_or(default) {
                0 => Err(invalid(name, "must be at least 1")),
                secs => Ok(Duration::from_secs(secs)),
            };
        let max_connections = match args.max_connections.or(file.max_connections) {
            Some(n) if n < 2 => {
                return Err(invalid(
                    "PLANGATE_MAX_CONNECTIONS",
                    "must be at least 2 (one to evict, one to serve)",
                ));
            }
            other => other,
        };
        Ok(PerimeterSettings {
            allowed_origins,
            allowed_hosts,
            header_read_timeout: seconds(
                "PLANGATE_HEADER_READ_TIMEOUT_SECS",
                args.header_read_timeout_secs
                    .or(file.header_read_timeout_secs),
                DEFAULT_HEADER_READ_TIMEOUT_SECS,
            )?,
            idle_timeout: seconds(
                "PLANGATE_IDLE_TIMEOUT_SECS",
                args.idle_timeout_secs.or(file.idle_timeout_secs),
                DEFAULT_IDLE_TIMEOUT_SECS,
            )?,
            max_connections,
            session_ttl: seconds(
                "PLANGATE_SESSION_TTL_SECS",
                args.session_ttl_secs.or(file.session_ttl_secs),
                DEFAULT_SESSION_TTL_SECS,
            )?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origins_fill_the_default_port_and_ignore_case() {
        let origin = WebOrigin::parse("HTTP://LocalHost").unwrap();
        assert_eq!(origin, WebOrigin::http("localhost", 80));
        assert_eq!(
            WebOrigin::parse("https://a.example:8443")
                .unwrap()
                .to_string(),
            "https://a.example:8443"
        );
        assert_eq!(
            WebOrigin::parse("http://[::1]:8080"),
            Some(WebOrigin::http("[::1]", 8080))
        );
        for bad in [
            "null",
            "",
            "ftp://a",
            "http://",
            "http://a:99999",
            "http://a/b",
            "http://a b",
        ] {
            assert_eq!(WebOrigin::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn hosts_split_and_loopback_is_recognised() {
        assert_eq!(
            HostPort::split("Example.COM.:80"),
            Some(("example.com".to_owned(), Some(80)))
        );
        assert_eq!(HostPort::split("[::1]"), Some(("[::1]".to_owned(), None)));
        assert_eq!(HostPort::split("a:b"), None);
        for host in ["localhost", "127.0.0.1", "127.1.2.3", "[::1]"] {
            assert!(HostPort::is_loopback(host), "{host}");
        }
        for host in ["rebind.attacker.example", "10.0.0.1", "localhost.evil"] {
            assert!(!HostPort::is_loopback(host), "{host}");
        }
    }

    #[test]
    fn bad_entries_name_their_variable() {
        let bad = |args: ServeArgs| {
            PerimeterSettings::merge(&args, &FileConfig::default())
                .unwrap_err()
                .to_string()
        };
        assert!(
            bad(ServeArgs {
                allowed_origins: Some("https://ok.example,plangate.example".into()),
                ..Default::default()
            })
            .contains("PLANGATE_ALLOWED_ORIGINS")
        );
        assert!(
            bad(ServeArgs {
                allowed_hosts: Some("a/b".into()),
                ..Default::default()
            })
            .contains("PLANGATE_ALLOWED_HOSTS")
        );
        assert!(
            bad(ServeArgs {
                max_connections: Some(1),
                ..Default::default()
            })
            .contains("PLANGATE_MAX_CONNECTIONS")
        );
        let ok = PerimeterSettings::merge(
            &ServeArgs {
                allowed_origins: Some("https://plangate.example/, http://localhost:3000".into()),
                ..Default::default()
            },
            &FileConfig::default(),
        )
        .unwrap();
        assert_eq!(ok.allowed_origins.len(), 2);
        assert_eq!(
            ok.session_ttl,
            Duration::from_secs(DEFAULT_SESSION_TTL_SECS)
        );
    }
}
