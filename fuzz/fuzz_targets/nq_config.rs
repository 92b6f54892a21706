//! What `sonde rpm` reads from a server it does not control: the draft's configuration
//! (`/.well-known/nq`) and the URLs in it. Any bytes give a configuration or an error naming
//! the rule broken, never a panic; a configuration taken has three URLs on one host, and
//! each reads back as itself (what the client sends is what it checked).
#![no_main]

use libfuzzer_sys::fuzz_target;
use sonde_rpm::config::{parse, Url};

fuzz_target!(|data: &[u8]| {
    if let Ok(c) = parse(data) {
        assert_eq!(c.large_download.host, c.small_download.host);
        assert_eq!(c.large_download.host, c.upload.host);
        for u in [&c.large_download, &c.small_download, &c.upload] {
            assert_eq!(Url::parse(&u.text()).as_ref(), Ok(u));
            assert!(u.path.starts_with('/'));
        }
    }
    if let Ok(text) = std::str::from_utf8(data) {
        if let Ok(u) = Url::parse(text) {
            assert_eq!(Url::parse(&u.text()), Ok(u));
        }
    }
});
