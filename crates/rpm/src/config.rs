//! The test endpoint's configuration (`/.well-known/nq`), read as the draft's "Test Server
//! Discovery" section says: `version` 1, the three URLs each exactly once, `http` or
//! `https`, all on one host (so they can share a connection), `test_endpoint` at most once;
//! names it does not know are ignored. Anything else makes the whole object invalid, and
//! the error says which rule it broke. Bytes in, a value out: no I/O.

use serde::Deserialize;

/// The most a configuration may weigh: ours is under 300 bytes, Apple's and Cloudflare's
/// under 1 KiB; a larger answer is not a configuration.
pub const MAX_CONFIG_BYTES: usize = 64 << 10;

/// A URL split as the test needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Url {
    pub tls: bool,
    pub host: String,
    pub port: u16,
    /// Path and query, starting with `/`.
    pub path: String,
}

/// Why a text is not a URL a test takes; each names the text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UrlError {
    #[error("'{0}' is not an http:// or https:// URL")]
    Scheme(String),
    #[error("'{0}': user information in a URL is not taken")]
    UserInfo(String),
    #[error("'{0}': an unclosed '[' in the host")]
    Unclosed(String),
    #[error("'{text}': '{after}' after the host")]
    AfterHost { text: String, after: String },
    #[error("'{text}': '{port}' is not a port")]
    Port { text: String, port: String },
    #[error("'{0}': no host, or a host with spaces")]
    Host(String),
    #[error("'{0}': a path with spaces or controls")]
    Path(String),
}

impl Url {
    /// `http[s]://host[:port][/path]`, refused with why; IPv6 hosts in brackets.
    pub fn parse(text: &str) -> Result<Url, UrlError> {
        let (tls, rest) = if let Some(r) = text.strip_prefix("https://") {
            (true, r)
        } else if let Some(r) = text.strip_prefix("http://") {
            (false, r)
        } else {
            return Err(UrlError::Scheme(text.to_string()));
        };
        let (authority, path) = match rest.find(['/', '?']) {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, "/"),
        };
        let path = match path.split_once('#') {
            Some((p, _)) => p,
            None => path,
        };
        let path = if path.starts_with('?') {
            format!("/{path}")
        } else {
            path.to_string()
        };
        if authority.contains('@') {
            return Err(UrlError::UserInfo(text.to_string()));
        }
        let default = if tls { 443 } else { 80 };
        let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
            let (h, after) = v6
                .split_once(']')
                .ok_or_else(|| UrlError::Unclosed(text.to_string()))?;
            let port = match after.strip_prefix(':') {
                Some(p) => parse_port(text, p)?,
                None if after.is_empty() => default,
                None => {
                    return Err(UrlError::AfterHost {
                        text: text.to_string(),
                        after: after.to_string(),
                    })
                }
            };
            // Brackets hold an IPv6 address and nothing else (the fuzzer's
            // `https://[[[[[[[[ZZZZZZZ]//]]]` took `[[[[[[[zzzzzzz` as a host).
            if h.parse::<std::net::Ipv6Addr>().is_err() {
                return Err(UrlError::Host(text.to_string()));
            }
            (h.to_string(), port)
        } else {
            let (h, port) = match authority.rsplit_once(':') {
                Some((h, p)) => (h, parse_port(text, p)?),
                None => (authority, default),
            };
            if h.contains([':', '[', ']']) {
                return Err(UrlError::Host(text.to_string()));
            }
            (h.to_string(), port)
        };
        if host.is_empty() || host.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(UrlError::Host(text.to_string()));
        }
        if path.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(UrlError::Path(text.to_string()));
        }
        Ok(Url {
            tls,
            host: host.to_ascii_lowercase(),
            port,
            path,
        })
    }

    /// `host:port` (brackets around an IPv6 host), for `Host`/`:authority`.
    pub fn authority(&self) -> String {
        let host = match self.host.contains(':') {
            true => format!("[{}]", self.host),
            false => self.host.clone(),
        };
        format!("{host}:{}", self.port)
    }

    /// The URL again, as a client would send it.
    pub fn text(&self) -> String {
        let scheme = if self.tls { "https" } else { "http" };
        format!("{scheme}://{}{}", self.authority(), self.path)
    }
}

fn parse_port(text: &str, p: &str) -> Result<u16, UrlError> {
    p.parse::<u16>()
        .ok()
        .filter(|&p| p != 0)
        .ok_or_else(|| UrlError::Port {
            text: text.to_string(),
            port: p.to_string(),
        })
}

/// A valid configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NqConfig {
    pub large_download: Url,
    pub small_download: Url,
    pub upload: Url,
    /// Where to connect instead of the URLs' host (their host still goes in the requests).
    pub test_endpoint: Option<String>,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ConfigError {
    #[error("not JSON, or not one object: {0}")]
    NotJson(String),
    #[error("larger than {MAX_CONFIG_BYTES} bytes")]
    TooLarge,
    #[error("\"{0}\" appears more than once (the draft: the whole object is invalid)")]
    Duplicate(String),
    #[error("\"{0}\" is missing")]
    Missing(&'static str),
    #[error("version {0}: this client reads version 1 only")]
    Version(String),
    #[error("\"{0}\": {1}")]
    BadUrl(&'static str, String),
    #[error("the URLs name different hosts ({0} and {1}): the draft requires one host")]
    Hosts(String, String),
    #[error("\"test_endpoint\" is not a host name: {0}")]
    Endpoint(String),
}

/// A JSON object's members in their order, repeats kept (a map or a derived struct would
/// keep one silently, and the draft makes a repeat invalidate the whole object).
/// `urls` is kept as members too, so that a repeat inside it is seen.
struct Members(Vec<(String, serde_json::Value)>, Vec<Members>);

impl<'de> Deserialize<'de> for Members {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visit;
        impl<'de> serde::de::Visitor<'de> for Visit {
            type Value = Members;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut m: A,
            ) -> Result<Members, A::Error> {
                let (mut v, mut urls) = (Vec::new(), Vec::new());
                while let Some(key) = m.next_key::<String>()? {
                    if key == "urls" {
                        urls.push(m.next_value::<Members>()?);
                        v.push((key, serde_json::Value::Null));
                    } else {
                        v.push((key, m.next_value()?));
                    }
                }
                Ok(Members(v, urls))
            }
        }
        d.deserialize_map(Visit)
    }
}

impl Members {
    /// The one value of `name`: `None` when absent, an error when repeated.
    fn once(&self, name: &'static str) -> Result<Option<&serde_json::Value>, ConfigError> {
        let mut found = self.0.iter().filter(|(k, _)| k == name).map(|(_, v)| v);
        let first = found.next();
        match found.next() {
            Some(_) => Err(ConfigError::Duplicate(name.into())),
            None => Ok(first),
        }
    }
}

/// Reads a configuration; the error names the rule it broke.
pub fn parse(bytes: &[u8]) -> Result<NqConfig, ConfigError> {
    if bytes.len() > MAX_CONFIG_BYTES {
        return Err(ConfigError::TooLarge);
    }
    let top: Members =
        serde_json::from_slice(bytes).map_err(|e| ConfigError::NotJson(e.to_string()))?;
    let version = top
        .once("version")?
        .ok_or(ConfigError::Missing("version"))?;
    if version.as_u64() != Some(1) {
        return Err(ConfigError::Version(version.to_string()));
    }
    top.once("urls")?.ok_or(ConfigError::Missing("urls"))?;
    let urls = &top.1[0];
    // The names before the draft's (Apple's servers send both, mach and goresponsiveness
    // read only these): taken when the draft's is absent.
    let url = |name: &'static str| -> Result<Url, ConfigError> {
        let legacy = match name {
            "large_download_url" => "large_https_download_url",
            "small_download_url" => "small_https_download_url",
            _ => "https_upload_url",
        };
        let v = match urls.once(name)? {
            Some(v) => v,
            None => urls.once(legacy)?.ok_or(ConfigError::Missing(name))?,
        };
        let text = v
            .as_str()
            .ok_or_else(|| ConfigError::BadUrl(name, format!("{v} is not a string")))?;
        Url::parse(text).map_err(|e| ConfigError::BadUrl(name, e.to_string()))
    };
    let large_download = url("large_download_url")?;
    let small_download = url("small_download_url")?;
    let upload = url("upload_url")?;
    for other in [&small_download, &upload] {
        if other.host != large_download.host {
            return Err(ConfigError::Hosts(
                large_download.host.clone(),
                other.host.clone(),
            ));
        }
    }
    let test_endpoint = match top.once("test_endpoint")? {
        None => None,
        Some(serde_json::Value::String(s)) if valid_host(s) => Some(s.clone()),
        Some(v) => return Err(ConfigError::Endpoint(v.to_string())),
    };
    Ok(NqConfig {
        large_download,
        small_download,
        upload,
        test_endpoint,
    })
}

fn valid_host(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | ':' | '[' | ']'))
}

/// The configuration a server at `base` (`https://host:port`) serves: its own three paths,
/// under the draft's names and, as Apple's servers do, under the names before them too
/// (Cloudflare's mach and goresponsiveness read only those; a client of the draft ignores
/// names it does not know).
pub fn render(base: &str) -> String {
    let base = base.trim_end_matches('/');
    format!(
        concat!(
            "{{\"version\":1,\"urls\":{{",
            "\"large_download_url\":\"{b}/large\",",
            "\"small_download_url\":\"{b}/small\",",
            "\"upload_url\":\"{b}/upload\",",
            "\"large_https_download_url\":\"{b}/large\",",
            "\"small_https_download_url\":\"{b}/small\",",
            "\"https_upload_url\":\"{b}/upload\"}}}}\n"
        ),
        b = base
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"{"version":1,"urls":{"large_download_url":"https://nq.example.com/large",
        "small_download_url":"https://nq.example.com/small","upload_url":"https://nq.example.com/upload"},
        "test_endpoint":"test.example.com","future_name":{"x":1}}"#;

    #[test]
    fn reads_the_drafts_object_and_ignores_unknown_names() {
        let c = parse(GOOD.as_bytes()).unwrap();
        assert_eq!(c.large_download.path, "/large");
        assert_eq!(c.upload.host, "nq.example.com");
        assert_eq!(c.small_download.port, 443);
        assert_eq!(c.test_endpoint.as_deref(), Some("test.example.com"));
    }

    #[test]
    fn the_names_before_the_drafts_are_read_when_the_drafts_are_absent() {
        let old = GOOD
            .replace("\"large_download_url\"", "\"large_https_download_url\"")
            .replace("\"small_download_url\"", "\"small_https_download_url\"")
            .replace("\"upload_url\"", "\"https_upload_url\"");
        let c = parse(old.as_bytes()).unwrap();
        assert_eq!(c.upload.path, "/upload");
        // Both: the draft's win.
        let both = GOOD.replace(
            "\"upload_url\"",
            "\"https_upload_url\":\"https://nq.example.com/old\",\"upload_url\"",
        );
        assert_eq!(parse(both.as_bytes()).unwrap().upload.path, "/upload");
    }

    #[test]
    fn our_own_rendering_reads_back() {
        let c = parse(render("https://[::1]:4443/").as_bytes()).unwrap();
        assert_eq!(c.small_download.text(), "https://[::1]:4443/small");
        assert!(c.large_download.tls);
    }

    #[test]
    fn each_rule_of_the_draft_is_named_when_broken() {
        let swap = |from: &str, to: &str| parse(GOOD.replacen(from, to, 1).as_bytes());
        assert_eq!(
            swap("\"version\":1", "\"version\":2"),
            Err(ConfigError::Version("2".into()))
        );
        assert_eq!(
            swap("\"version\":1,", ""),
            Err(ConfigError::Missing("version"))
        );
        assert_eq!(
            swap("\"upload_url\"", "\"uploadurl\""),
            Err(ConfigError::Missing("upload_url"))
        );
        assert!(matches!(
            swap("\"version\":1,", "\"version\":1,\"version\":1,"),
            Err(ConfigError::Duplicate(d)) if d == "version"
        ));
        assert!(matches!(
            swap("\"upload_url\"", "\"upload_url\":\"https://nq.example.com/u\",\"upload_url\""),
            Err(ConfigError::Duplicate(d)) if d == "upload_url"
        ));
        assert!(matches!(
            swap(
                "https://nq.example.com/upload",
                "ftp://nq.example.com/upload"
            ),
            Err(ConfigError::BadUrl("upload_url", _))
        ));
        assert!(matches!(
            swap(
                "https://nq.example.com/small",
                "https://other.example.com/small"
            ),
            Err(ConfigError::Hosts(..))
        ));
        assert!(matches!(
            swap("\"test.example.com\"", "7"),
            Err(ConfigError::Endpoint(_))
        ));
        assert!(matches!(parse(b"<html>"), Err(ConfigError::NotJson(_))));
        assert_eq!(
            parse(&vec![b' '; MAX_CONFIG_BYTES + 1]),
            Err(ConfigError::TooLarge)
        );
    }

    #[test]
    fn urls_split_into_what_a_connection_needs() {
        let u = Url::parse("http://198.18.0.2:8080/a?b=c#frag").unwrap();
        assert_eq!(
            (u.tls, u.host.as_str(), u.port, u.path.as_str()),
            (false, "198.18.0.2", 8080, "/a?b=c")
        );
        assert_eq!(Url::parse("https://h").unwrap().path, "/");
        assert!(Url::parse("https://u:p@h/").is_err());
        assert_eq!(
            Url::parse("https://h:0/"),
            Err(UrlError::Port {
                text: "https://h:0/".into(),
                port: "0".into()
            })
        );
        assert!(Url::parse("https://h:99999/").is_err());
        assert!(Url::parse("https:///x").is_err());
    }

    /// Brackets hold an IPv6 address only, and a host outside them has no ':' or brackets:
    /// every URL taken reads back as itself (the fuzzer's find, nq_config).
    #[test]
    fn only_an_ipv6_address_is_taken_in_brackets() {
        let v6 = Url::parse("http://[FD00::2]:8080/x").unwrap();
        assert_eq!(v6.host, "fd00::2");
        assert_eq!(Url::parse(&v6.text()), Ok(v6));
        for bad in [
            "https://[[[[[[[[ZZZZZZZ]//]]]",
            "https://[host]/",
            "http://a:b:80/",
            "http://a]b/",
        ] {
            assert_eq!(Url::parse(bad), Err(UrlError::Host(bad.into())), "{bad}");
        }
    }
}
