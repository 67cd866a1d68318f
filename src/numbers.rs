//! Counts as people read them (pure): `50,000`, one way on every page, in the audit log and
//! in notifications.

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
}
