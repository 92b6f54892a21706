//! iperf3's authentication, the part without keys: the text a client encrypts with the
//! server's RSA public key (its `authtoken`, base64 of the ciphertext), and the checks
//! that its server's parser (`sscanf` of that text, fields split at whitespace) and its
//! users file (`USER,HASH` lines) make of a username and password. The RSA itself is
//! the caller's.

/// The plaintext of iperf3's `authtoken` (`auth_text_format` in iperf_auth.c): the
/// username, the password and the client's clock in Unix seconds, which the server holds
/// to its own within its skew threshold (10 s by default).
pub fn token_text(username: &str, password: &str, unix_s: i64) -> String {
    format!("user: {username}\npwd:  {password}\nts:   {unix_s}")
}

/// Why iperf3's server could never match `username` and `password`, if so: it reads each
/// as one whitespace-free word, and its users file splits a line at the first comma.
pub fn credentials_problem(username: &str, password: &str) -> Option<String> {
    let word = |what: &str, v: &str| {
        if v.is_empty() {
            Some(format!("the {what} is empty"))
        } else if v.chars().any(|c| c.is_whitespace() || c.is_control()) {
            Some(format!(
                "the {what} holds whitespace or a control character, which iperf3's server cannot read"
            ))
        } else {
            None
        }
    };
    let comma = username
        .contains(',')
        .then(|| "the username holds a comma, which iperf3's users file cannot hold".to_string());
    word("username", username)
        .or(comma)
        .or_else(|| word("password", password))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_token_text_is_iperf3s() {
        assert_eq!(
            token_text("mario", "rossi", 1_700_000_000),
            "user: mario\npwd:  rossi\nts:   1700000000"
        );
    }

    #[test]
    fn credentials_iperf3_cannot_read_are_named() {
        assert_eq!(credentials_problem("mario", "rossi"), None);
        for (u, p, says) in [
            ("", "x", "username is empty"),
            ("a b", "x", "username holds whitespace"),
            ("a,b", "x", "comma"),
            ("a", "", "password is empty"),
            ("a", "x\ny", "password holds whitespace"),
        ] {
            let why = credentials_problem(u, p).unwrap();
            assert!(why.contains(says), "{u:?} {p:?}: {why}");
        }
    }
}
