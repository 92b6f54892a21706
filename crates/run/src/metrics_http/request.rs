//! One request to the metrics endpoint, without I/O: the bytes read so far in, the
//! answer out (or "read more"). Only `GET /metrics` with no body is served; with a token,
//! only to a client that presents it (`Authorization: Bearer ...`, as Prometheus'
//! `authorization.credentials_file` sends it).

use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use super::error::MetricsError;

/// The OpenMetrics text's media type, which every body this server writes is (the
/// report crate's encoders write it; Prometheus asks for it).
pub use sonde_report::openmetrics::CONTENT_TYPE;

/// The most of a request the server reads: its request line and headers.
pub const MAX_REQUEST_BYTES: usize = 8 << 10;
/// Headers beyond these are refused (Prometheus sends about eight).
const MAX_HEADERS: usize = 32;

/// The bearer token a scrape must present, kept as its SHA-256 so that comparing takes
/// the same time whatever the length or the content of what a client sent.
#[derive(Clone)]
pub struct Token([u8; 32]);

impl Token {
    pub fn new(secret: &[u8]) -> Token {
        Token(Sha256::digest(secret).into())
    }

    /// The token in `path` (`--metrics-token-file`): a private file (as a key file), its
    /// text trimmed, at least 16 printable characters with no space.
    pub fn from_file(path: &std::path::Path) -> Result<Token, MetricsError> {
        let flag = "--metrics-token-file";
        let bytes = crate::key::read_private(flag, path)?;
        let text = bytes.trim_ascii();
        if text.len() < 16 || !text.iter().all(|b| b.is_ascii_graphic()) {
            return Err(MetricsError::File {
                flag,
                path: path.display().to_string(),
                why: "the token must be at least 16 printable characters without spaces".into(),
            });
        }
        Ok(Token::new(text))
    }

    fn admits(&self, presented: &[u8]) -> bool {
        let digest: [u8; 32] = Sha256::digest(presented).into();
        self.0.ct_eq(&digest).into()
    }
}

/// What the server does with the bytes read so far.
pub enum Step {
    /// The request is not complete yet.
    More,
    /// The whole response to write, after which the connection closes.
    Answer(Vec<u8>),
    /// The metrics: [`metrics_head`] and the server's shared body, then the close.
    Metrics,
}

/// The answer to `buf` (the request's first bytes), or `More`. `full` says the buffer is
/// at its limit or the client has stopped sending: an incomplete request then is refused.
pub fn step(buf: &[u8], full: bool, token: Option<&Token>) -> Step {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut req = httparse::Request::new(&mut headers);
    match req.parse(buf) {
        Ok(httparse::Status::Complete(_)) => answer(&req, token),
        Ok(httparse::Status::Partial) if !full => Step::More,
        // The client stopped before the end of its head.
        Ok(httparse::Status::Partial) if buf.len() < MAX_REQUEST_BYTES => {
            Step::Answer(bad_request("incomplete request\n"))
        }
        Ok(httparse::Status::Partial) | Err(httparse::Error::TooManyHeaders) => {
            Step::Answer(response(
                "431 Request Header Fields Too Large",
                "text/plain",
                "request line and headers exceed 8 KiB or 32 headers\n",
            ))
        }
        Err(_) => Step::Answer(bad_request("malformed request\n")),
    }
}

fn answer(req: &httparse::Request, token: Option<&Token>) -> Step {
    let headers: &[httparse::Header] = req.headers;
    let header = move |name: &'static str| {
        headers
            .iter()
            .filter(move |h| h.name.eq_ignore_ascii_case(name))
            .map(|h| h.value)
    };
    if req.method != Some("GET") {
        return Step::Answer(response(
            "405 Method Not Allowed",
            "text/plain",
            "GET /metrics\n",
        ));
    }
    // A body on a GET is how a request is smuggled past a proxy: refused, never read.
    let has_body = header("transfer-encoding").next().is_some()
        || header("content-length").any(|v| v.iter().any(|&b| b != b'0'));
    if has_body {
        return Step::Answer(bad_request("a GET carries no body\n"));
    }
    if let Some(t) = token {
        let presented = header("authorization").next().and_then(bearer);
        if !presented.is_some_and(|p| t.admits(p)) {
            let mut r = response(
                "401 Unauthorized",
                "text/plain",
                "a bearer token is required\n",
            );
            // The header goes before the blank line that ends the head.
            let at = r.windows(4).position(|w| w == b"\r\n\r\n").unwrap_or(0) + 2;
            r.splice(
                at..at,
                b"WWW-Authenticate: Bearer realm=\"sonde\"\r\n"
                    .iter()
                    .copied(),
            );
            return Step::Answer(r);
        }
    }
    match req.path.unwrap_or("").split('?').next() {
        Some("/metrics") => Step::Metrics,
        _ => Step::Answer(response(
            "404 Not Found",
            "text/plain",
            "only /metrics is served\n",
        )),
    }
}

/// The head of the metrics' answer, its body of `len` bytes to follow.
pub fn metrics_head(len: usize) -> Vec<u8> {
    head("200 OK", CONTENT_TYPE, len).into_bytes()
}

/// The credentials of `Bearer CREDENTIALS` (the scheme's case ignored).
fn bearer(value: &[u8]) -> Option<&[u8]> {
    let (scheme, rest) = value.split_at(value.iter().position(|&b| b == b' ')?);
    scheme
        .eq_ignore_ascii_case(b"bearer")
        .then(|| rest.trim_ascii())
}

fn bad_request(why: &str) -> Vec<u8> {
    response("400 Bad Request", "text/plain", why)
}

fn head(status: &str, kind: &str, len: usize) -> String {
    format!("HTTP/1.1 {status}\r\nContent-Type: {kind}\r\nContent-Length: {len}\r\nConnection: close\r\n\r\n")
}

fn response(status: &str, kind: &str, text: &str) -> Vec<u8> {
    (head(status, kind, text.len()) + text).into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(req: &str, token: Option<&Token>) -> String {
        match step(req.as_bytes(), true, token) {
            Step::Answer(r) => String::from_utf8(r).unwrap().lines().next().unwrap().into(),
            Step::Metrics => "HTTP/1.1 200 OK".into(),
            Step::More => "more".into(),
        }
    }

    #[test]
    fn only_a_get_of_metrics_without_a_body_is_served() {
        assert_eq!(
            status("GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n", None),
            "HTTP/1.1 200 OK"
        );
        assert_eq!(
            status("GET /metrics?x=1 HTTP/1.0\r\n\r\n", None),
            "HTTP/1.1 200 OK"
        );
        for path in [
            "/",
            "/../../etc/passwd",
            "/metrics/../../etc/passwd",
            "/%2e%2e/etc",
        ] {
            let s = status(&format!("GET {path} HTTP/1.1\r\n\r\n"), None);
            assert_eq!(s, "HTTP/1.1 404 Not Found", "{path}");
        }
        for m in [
            "POST", "PUT", "DELETE", "OPTIONS", "TRACE", "CONNECT", "HEAD", "PATCH",
        ] {
            let s = status(&format!("{m} /metrics HTTP/1.1\r\n\r\n"), None);
            assert_eq!(s, "HTTP/1.1 405 Method Not Allowed", "{m}");
        }
        for smuggled in [
            "Content-Length: 28\r\n\r\nGET /secret HTTP/1.1\r\n\r\n",
            "Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
            "Content-Length: 0\r\nContent-Length: 5\r\n\r\n",
        ] {
            let s = status(&format!("GET /metrics HTTP/1.1\r\n{smuggled}"), None);
            assert_eq!(s, "HTTP/1.1 400 Bad Request", "{smuggled}");
        }
        let partial = step(b"GET /metrics HTTP/1.1\r\n", false, None);
        assert!(matches!(partial, Step::More));
        let cut = status("GET /metrics HTTP/1.1\r\n", None);
        assert_eq!(cut, "HTTP/1.1 400 Bad Request");
        let big = format!(
            "GET /metrics HTTP/1.1\r\nX: {}",
            "a".repeat(MAX_REQUEST_BYTES)
        );
        assert!(status(&big, None).starts_with("HTTP/1.1 431"));
        assert_eq!(
            status("\x16\x03\x01 garbage\r\n\r\n", None),
            "HTTP/1.1 400 Bad Request"
        );
        let many: String = (0..40).map(|i| format!("X-{i}: y\r\n")).collect();
        let s = status(&format!("GET /metrics HTTP/1.1\r\n{many}\r\n"), None);
        assert!(s.starts_with("HTTP/1.1 431"), "{s}");
    }

    #[test]
    fn with_a_token_only_its_bearer_is_served() {
        let t = Token::new(b"s3cret-token-of-the-monitor");
        let get = |auth: &str| status(&format!("GET /metrics HTTP/1.1\r\n{auth}\r\n"), Some(&t));
        assert_eq!(
            get("Authorization: Bearer s3cret-token-of-the-monitor\r\n"),
            "HTTP/1.1 200 OK"
        );
        assert_eq!(
            get("authorization: bearer s3cret-token-of-the-monitor\r\n"),
            "HTTP/1.1 200 OK"
        );
        for wrong in [
            "",
            "Authorization: Bearer s3cret-token-of-the-monitoR\r\n",
            "Authorization: Bearer s3cret\r\n",
            "Authorization: Basic czNjcmV0\r\n",
            "Authorization: Bearer\r\n",
        ] {
            assert_eq!(get(wrong), "HTTP/1.1 401 Unauthorized", "{wrong}");
        }
        let Step::Answer(r) = step(b"GET /metrics HTTP/1.1\r\n\r\n", true, Some(&t)) else {
            panic!()
        };
        let r = String::from_utf8(r).unwrap();
        assert!(
            r.contains("\r\nWWW-Authenticate: Bearer realm=\"sonde\"\r\n")
                && r.ends_with("\r\n\r\na bearer token is required\n"),
            "{r}"
        );
    }
}
