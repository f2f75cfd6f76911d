//! Percent-encoding of one URL component (path segment or query value): everything but
//! RFC 3986's unreserved characters is escaped, so the result is safe in either place.

pub fn component(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn escapes_all_but_unreserved() {
        assert_eq!(
            super::component("https://h.example.com/u?a=1 é"),
            "https%3A%2F%2Fh.example.com%2Fu%3Fa%3D1%20%C3%A9"
        );
        assert_eq!(super::component("A-z_0.9~"), "A-z_0.9~");
    }
}
