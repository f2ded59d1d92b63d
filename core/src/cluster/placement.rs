//! Checks on a Kubernetes placement: the shapes Kubernetes gives each name.
//!
//! The agent keeps a field only when it has its shape, and the state
//! accepts a placement only when every field it carries does: a pod UID is
//! a lowercase UUID with dashes, a container id 64 lowercase hex digits, a
//! namespace or container name a DNS label and a pod name a DNS subdomain
//! (RFC 1123, as Kubernetes validates them). So every name that reaches
//! the API and `/metrics` labels is short, printable and plain.

use gpumon_proto::PodPlacement;
use thiserror::Error;

use crate::limits::{CONTAINER_ID_BYTES, MAX_DNS_LABEL_BYTES, MAX_POD_NAME_BYTES, POD_UID_BYTES};

/// Why a placement was not kept.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum InvalidPlacement {
    /// A field does not have the shape Kubernetes gives it.
    #[error("placement {field} is not a valid {shape}")]
    BadField {
        /// Which field.
        field: &'static str,
        /// What it should be.
        shape: &'static str,
    },
    /// No field is set.
    #[error("placement has no field set")]
    Empty,
}

/// A pod UID: `8-4-4-4-12` lowercase hex digits with dashes.
pub fn is_pod_uid(s: &str) -> bool {
    s.len() == POD_UID_BYTES
        && s.bytes().enumerate().all(|(i, b)| match i {
            8 | 13 | 18 | 23 => b == b'-',
            _ => matches!(b, b'0'..=b'9' | b'a'..=b'f'),
        })
}

/// A container id: 64 lowercase hex digits.
pub fn is_container_id(s: &str) -> bool {
    s.len() == CONTAINER_ID_BYTES && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// An RFC 1123 label: 1 to 63 of `a-z`, `0-9` and `-`, starting and ending
/// with a letter or digit (namespaces, container names).
pub fn is_dns_label(s: &str) -> bool {
    s.len() <= MAX_DNS_LABEL_BYTES && is_dns_name(s, false)
}

/// An RFC 1123 subdomain: up to 253 bytes of labels joined by dots (pod
/// names).
pub fn is_dns_subdomain(s: &str) -> bool {
    s.len() <= MAX_POD_NAME_BYTES && is_dns_name(s, true)
}

fn is_dns_name(s: &str, dots: bool) -> bool {
    let alnum = |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    let mut parts = 0;
    for part in s.split('.') {
        parts += 1;
        let bytes = part.as_bytes();
        let (Some(&first), Some(&last)) = (bytes.first(), bytes.last()) else {
            return false;
        };
        if !alnum(first) || !alnum(last) || !bytes.iter().all(|&b| alnum(b) || b == b'-') {
            return false;
        }
    }
    dots || parts == 1
}

/// Checks every field a placement carries; an empty one is refused too.
pub fn check_placement(p: &PodPlacement) -> Result<(), InvalidPlacement> {
    check_field("pod_uid", &p.pod_uid, is_pod_uid, "pod UID")?;
    check_field("pod_name", &p.pod_name, is_dns_subdomain, "DNS subdomain")?;
    check_field("namespace", &p.namespace, is_dns_label, "DNS label")?;
    check_field(
        "container_id",
        &p.container_id,
        is_container_id,
        "container id",
    )?;
    check_field(
        "container_name",
        &p.container_name,
        is_dns_label,
        "DNS label",
    )?;
    if p.is_empty() {
        return Err(InvalidPlacement::Empty);
    }
    Ok(())
}

fn check_field(
    field: &'static str,
    value: &Option<String>,
    ok: fn(&str) -> bool,
    shape: &'static str,
) -> Result<(), InvalidPlacement> {
    match value {
        Some(v) if !ok(v) => Err(InvalidPlacement::BadField { field, shape }),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const UID: &str = "6f1c2b3a-4d5e-4f60-8a9b-0c1d2e3f4a5b";

    #[test]
    fn pod_uids_are_lowercase_uuids_with_dashes() {
        assert!(is_pod_uid(UID));
        assert!(!is_pod_uid(&UID.to_uppercase()));
        assert!(!is_pod_uid(&UID.replace('-', "_")));
        assert!(!is_pod_uid(&UID[1..]));
        assert!(!is_pod_uid(&format!("{UID}0")));
        assert!(!is_pod_uid("6f1c2b3a-4d5e-4f60-8a9b-0c1d2e3f4a5g"));
    }

    #[test]
    fn container_ids_are_64_lowercase_hex_digits() {
        assert!(is_container_id(&"0123456789abcdef".repeat(4)));
        assert!(!is_container_id(&"0123456789ABCDEF".repeat(4)));
        assert!(!is_container_id(&"ab".repeat(31)));
        assert!(!is_container_id(&"ab".repeat(33)));
    }

    #[test]
    fn names_follow_rfc_1123() {
        for good in ["ml", "a", "team-7", &"a".repeat(63)] {
            assert!(is_dns_label(good), "{good}");
            assert!(is_dns_subdomain(good), "{good}");
        }
        for bad in [
            "",
            "-a",
            "a-",
            "A",
            "a_b",
            "a.b",
            "é",
            "a b",
            &"a".repeat(64),
        ] {
            assert!(!is_dns_label(bad), "{bad:?}");
        }
        assert!(is_dns_subdomain("trainer-0.workers"));
        assert!(is_dns_subdomain(&format!("{}.b", "a".repeat(251))));
        for bad in ["", ".a", "a.", "a..b", "a\nb", &"a.".repeat(127)] {
            assert!(!is_dns_subdomain(bad), "{bad:?}");
        }
        assert!(!is_dns_subdomain(&"a".repeat(254)));
    }

    #[test]
    fn a_placement_is_checked_field_by_field() {
        let good = PodPlacement {
            pod_uid: Some(UID.into()),
            pod_name: Some("trainer-0".into()),
            namespace: Some("ml".into()),
            container_id: Some("ab".repeat(32)),
            container_name: Some("pytorch".into()),
        };
        assert_eq!(check_placement(&good), Ok(()));
        let only_uid = PodPlacement {
            pod_uid: Some(UID.into()),
            ..PodPlacement::default()
        };
        assert_eq!(check_placement(&only_uid), Ok(()));
        assert_eq!(
            check_placement(&PodPlacement::default()),
            Err(InvalidPlacement::Empty)
        );
        let bad = PodPlacement {
            namespace: Some("ML\u{7}".into()),
            ..good
        };
        let err = check_placement(&bad).unwrap_err();
        assert_eq!(
            err,
            InvalidPlacement::BadField {
                field: "namespace",
                shape: "DNS label"
            }
        );
        assert_eq!(
            err.to_string(),
            "placement namespace is not a valid DNS label"
        );
    }
}
