//! Byte and time units.

/// Bytes in a KiB.
pub const KIB: u64 = 1 << 10;
/// Bytes in a MiB.
pub const MIB: u64 = 1 << 20;
/// Bytes in a GiB.
pub const GIB: u64 = 1 << 30;

/// Formats bytes with a binary unit and one decimal: `1.5 GiB`, `512 B`.
pub fn fmt_bytes(bytes: u64) -> String {
    Bytes(bytes).to_string()
}

/// Bytes shown as [`fmt_bytes`] shows them, written straight into a
/// message (no string of their own).
#[derive(Debug, Clone, Copy)]
pub struct Bytes(pub u64);

impl std::fmt::Display for Bytes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        const UNITS: [(&str, u64); 4] =
            [("TiB", 1 << 40), ("GiB", GIB), ("MiB", MIB), ("KiB", KIB)];
        let bytes = self.0;
        for (name, size) in UNITS {
            if bytes >= size {
                return write!(f, "{:.1} {name}", bytes as f64 / size as f64);
            }
        }
        write!(f, "{bytes} B")
    }
}

/// Formats a duration in milliseconds as `1h02m`, `3m05s`, `4.2s` or `350ms`.
pub fn fmt_duration_ms(ms: u64) -> String {
    let s = ms / 1000;
    match s {
        0 => format!("{ms}ms"),
        1..=59 => format!("{:.1}s", ms as f64 / 1000.0),
        60..=3599 => format!("{}m{:02}s", s / 60, s % 60),
        _ => format!("{}h{:02}m", s / 3600, (s % 3600) / 60),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_bytes_with_binary_units() {
        assert_eq!(fmt_bytes(512), "512 B");
        assert_eq!(fmt_bytes(3 * GIB / 2), "1.5 GiB");
        assert_eq!(fmt_bytes(80 * GIB), "80.0 GiB");
        assert_eq!(fmt_bytes(2 * MIB), "2.0 MiB");
    }

    #[test]
    fn formats_durations() {
        assert_eq!(fmt_duration_ms(350), "350ms");
        assert_eq!(fmt_duration_ms(4200), "4.2s");
        assert_eq!(fmt_duration_ms(185_000), "3m05s");
        assert_eq!(fmt_duration_ms(3_720_000), "1h02m");
    }
}
