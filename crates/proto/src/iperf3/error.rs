//! What can go wrong speaking iperf3, each naming what the far end did.

use super::State;

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Iperf3Error {
    #[error("the iperf3 server is busy running another test (ACCESS_DENIED); try again later")]
    AccessDenied,
    #[error("the iperf3 server refused the test: {}", describe(*code, *errno))]
    ServerError { code: i32, errno: i32 },
    #[error("the iperf3 server ended the test (SERVER_TERMINATE)")]
    ServerTerminated,
    #[error("the iperf3 client ended the test (CLIENT_TERMINATE)")]
    ClientTerminated,
    #[error(
        "the iperf3 peer sent state byte {byte} while {doing}: not iperf3 3.x, or out of order"
    )]
    UnexpectedState { byte: i8, doing: &'static str },
    #[error("the iperf3 peer announced {what} of {bytes} bytes, over the {max} allowed")]
    TooLong {
        what: &'static str,
        bytes: u32,
        max: u32,
    },
    #[error("the iperf3 peer announced empty {0}")]
    Empty(&'static str),
    #[error("the iperf3 peer's {what} are not valid: {reason}")]
    BadJson { what: &'static str, reason: String },
    #[error("the iperf3 peer's parameters: {0}")]
    BadParams(String),
    #[error("the iperf3 peer sent nothing for {secs} s while {doing}")]
    Timeout { doing: &'static str, secs: u64 },
    #[error("the iperf3 peer closed the control connection while {0}")]
    Closed(&'static str),
    #[error("the iperf3 peer sent bytes after the test ended")]
    Trailing,
    #[error("the iperf3 control connection is not in a state to {0}")]
    Misuse(&'static str),
}

/// iperf3's error numbers a server refuses with most often (iperf_api.h `IE*`), named.
fn describe(code: i32, errno: i32) -> String {
    let what = match code {
        5 => "bad duration (-t)",
        6 => "too many streams (-P)",
        7 => "bad block size (-l)",
        8 => "bad buffer size (-w)",
        12 => "bad omit (-O)",
        20 => "bad UDP block size (-l)",
        27 => "the requested rate exceeds the server's limit",
        37 => "the test is longer than the server allows",
        114 => "the server could not take the parameters",
        134 => "the server cannot set the congestion control (-C)",
        142 => "the server requires iperf3 authentication (a username and password under its RSA key) and did not accept this test's",
        _ => "iperf3 error",
    };
    if errno > 0 {
        format!("{what} (iperf3 error {code}, errno {errno})")
    } else {
        format!("{what} (iperf3 error {code})")
    }
}

impl Iperf3Error {
    /// The state byte that ends a test because of this error, for the far end.
    pub fn state(&self) -> State {
        State::ServerError
    }
}
