//! Credentials in a receiver URL (`http://user:pass@am:9093`) as a Basic
//! `Authorization` header (RFC 7617), as reqwest sent them before the
//! notifier had its own client. Tiny enough to write here rather than
//! depend on a base64 crate.

use reqwest::header::HeaderValue;

/// `Basic base64(user:pass)` from `url`'s (percent-decoded) credentials,
/// marked sensitive; `None` without credentials.
pub fn header(url: &reqwest::Url) -> Option<HeaderValue> {
    if url.username().is_empty() && url.password().is_none() {
        return None;
    }
    let mut plain = percent_decode(url.username());
    plain.push(b':');
    plain.extend(percent_decode(url.password().unwrap_or_default()));
    let mut value = HeaderValue::try_from(format!("Basic {}", base64(&plain))).ok()?;
    value.set_sensitive(true);
    Some(value)
}

/// `%XX` escapes to bytes; anything else (a stray `%` too) as it is.
fn percent_decode(s: &str) -> Vec<u8> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes.get(i + 1..i + 3).and_then(|h| {
            std::str::from_utf8(h)
                .ok()
                .and_then(|h| u8::from_str_radix(h, 16).ok())
        });
        match (bytes[i], hex) {
            (b'%', Some(b)) => {
                out.push(b);
                i += 3;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    out
}

/// Standard base64 with padding.
fn base64(data: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(data.len().div_ceil(3) * 4);
    for chunk in data.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, b)| n | u32::from(*b) << (16 - 8 * i));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(ALPHABET[(n >> (18 - 6 * i) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_become_the_rfc_7617_header() {
        // RFC 7617 section 2's example: "Aladdin" / "open sesame".
        let url = reqwest::Url::parse("http://Aladdin:open%20sesame@am:9093/").unwrap();
        let value = header(&url).unwrap();
        assert_eq!(value, "Basic QWxhZGRpbjpvcGVuIHNlc2FtZQ==");
        assert!(value.is_sensitive());
        let plain = reqwest::Url::parse("http://am:9093/").unwrap();
        assert!(header(&plain).is_none());
    }

    #[test]
    fn base64_pads_every_remainder() {
        // RFC 4648 section 10's test vectors.
        for (plain, encoded) in [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
        ] {
            assert_eq!(base64(plain.as_bytes()), encoded, "{plain:?}");
        }
    }
}
