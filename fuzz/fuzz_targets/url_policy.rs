//! URL policy: any string is judged without panicking, and a URL the policy admits has
//! an http(s) scheme and a host that is not a non-public IP literal.
#![no_main]

use libfuzzer_sys::fuzz_target;
use umpire_fetch::policy::{check_url, is_public_ip};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(url) = check_url(text) {
        assert!(
            matches!(url.scheme(), "http" | "https"),
            "{text:?} -> {url}"
        );
        match url.host() {
            Some(url::Host::Ipv4(ip)) => assert!(is_public_ip(ip.into()), "{text:?} -> {url}"),
            Some(url::Host::Ipv6(ip)) => assert!(is_public_ip(ip.into()), "{text:?} -> {url}"),
            Some(url::Host::Domain(_)) => {}
            None => panic!("an admitted URL without a host: {text:?}"),
        }
    }
});
