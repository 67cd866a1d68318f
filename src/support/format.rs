//! Values as people read them (pure), one way on every page, in the audit log, the command
//! line and notifications: counts (`50,000`), byte sizes (`1.5 KiB`), instants (RFC 3339, UTC).

use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;

/// 1234567 as "1,234,567" (any integer that fits an i128: counts of every width).
pub fn thousands(n: impl Into<i128>) -> String {
    let n: i128 = n.into();
    let digits = n.unsigned_abs().to_string();
    let mut out = String::from(if n < 0 { "-" } else { "" });
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// "1 message", "50,000 messages": a count and its noun, singular for one.
pub fn count(n: i64, one: &str, many: &str) -> String {
    match n {
        1 => format!("1 {one}"),
        n => format!("{} {many}", thousands(n)),
    }
}

/// RFC 3339 in UTC, second precision: what `<time datetime>` and the pages show.
pub fn utc(t: OffsetDateTime) -> String {
    t.replace_nanosecond(0)
        .unwrap_or(t)
        .format(&Rfc3339)
        .unwrap_or_else(|_| t.to_string())
}

/// A byte count for people: `512 B`, `1.5 KiB`, `16.0 MiB`.
pub fn human_bytes(n: i64) -> String {
    const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
    if n < 1024 {
        return format!("{n} B");
    }
    let mut value = n as f64;
    let mut unit = "B";
    for u in UNITS {
        if value < 1024.0 {
            break;
        }
        value /= 1024.0;
        unit = u;
    }
    format!("{value:.1} {unit}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_are_written_with_thousands_separators() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1_234), "1,234");
        assert_eq!(thousands(50_000), "50,000");
        assert_eq!(thousands(-10_000_000), "-10,000,000");
        assert_eq!(count(1, "message", "messages"), "1 message");
        assert_eq!(count(12_000, "message", "messages"), "12,000 messages");
    }

    #[test]
    fn byte_counts_read_well() {
        assert_eq!(human_bytes(0), "0 B");
        assert_eq!(human_bytes(1536), "1.5 KiB");
        assert_eq!(human_bytes(16 * 1024 * 1024), "16.0 MiB");
    }

    #[test]
    fn times_are_utc_seconds() {
        let t = OffsetDateTime::from_unix_timestamp(1_764_669_600).unwrap();
        assert_eq!(
            utc(t + time::Duration::milliseconds(250)),
            "2025-12-02T10:00:00Z"
        );
    }
}
