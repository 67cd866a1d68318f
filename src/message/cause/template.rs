//! An error message's template (pure): what varies from one failure of the same bug to the
//! next — ids, numbers, UUIDs, hex, emails, times, URLs' query values, quoted values — replaced
//! by placeholders, so that `no customer with id C-1007` and `… C-1017` read the same.

/// Longest template kept; a longer message is cut first (on a character).
pub const MAX_TEMPLATE_CHARS: usize = 300;

/// The template of `message`.
pub fn template(message: &str) -> String {
    let mut out = String::with_capacity(message.len().min(MAX_TEMPLATE_CHARS * 4));
    let chars: Vec<char> = message.chars().take(MAX_TEMPLATE_CHARS * 4).collect();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if let Some(close) = quote_pair(c) {
            // A quoted value, up to its closing quote on the same line.
            if let Some(len) = chars[i + 1..]
                .iter()
                .take_while(|&&x| x != '\n')
                .position(|&x| x == close)
            {
                let inner: String = chars[i + 1..i + 1 + len].iter().collect();
                // An apostrophe in running text (`can't`, `customer's`) is no quote.
                let prose = c == '\'' && i > 0 && chars[i - 1].is_alphanumeric();
                if !prose {
                    out.push(c);
                    out.push_str(if inner.is_empty() { "" } else { "<value>" });
                    out.push(close);
                    i += len + 2;
                    continue;
                }
            }
        }
        if c == '?' || (c == '&' && out.contains('?')) {
            // A URL's query: keep the names, not the values.
            if let Some(end) = query_param(&chars, i + 1) {
                let name: String = chars[i + 1..end].iter().collect();
                out.push(c);
                out.push_str(&name);
                out.push_str("=<value>");
                i = end + 1;
                while i < chars.len() && !is_query_end(chars[i]) {
                    i += 1;
                }
                continue;
            }
        }
        if is_word(c) {
            let start = i;
            while i < chars.len() && (is_word(chars[i]) || joins_word(&chars, i)) {
                i += 1;
            }
            let word: String = chars[start..i].iter().collect();
            out.push_str(&placeholder(&word).unwrap_or(word));
            continue;
        }
        out.push(c);
        i += 1;
    }
    collapse(out)
}

/// What replaces a word that varies, if it does.
fn placeholder(word: &str) -> Option<String> {
    if is_uuid(word) {
        return Some("<uuid>".into());
    }
    if is_email(word) {
        return Some("<email>".into());
    }
    if is_time(word) {
        return Some("<time>".into());
    }
    if is_hex(word) {
        return Some("<hex>".into());
    }
    if !word.chars().any(|c| c.is_ascii_digit()) {
        return None;
    }
    // A word with digits: each run of digits (with its decimals) is a number; letters that
    // only prefix or suffix it stay (`C-1007` → `C-<n>`, `250ms` → `<n>ms`). A word mostly of
    // mixed letters and digits (`a1b2c3d4`, an opaque id) is one id.
    let letters = word.chars().filter(|c| c.is_alphabetic()).count();
    let digits = word.chars().filter(|c| c.is_ascii_digit()).count();
    let switches = word
        .chars()
        .zip(word.chars().skip(1))
        .filter(|(a, b)| a.is_ascii_digit() != b.is_ascii_digit() && b.is_alphanumeric())
        .count();
    if letters > 0 && switches >= 3 && digits >= 2 {
        return Some("<id>".into());
    }
    let mut out = String::new();
    let mut chars = word.chars().peekable();
    while let Some(c) = chars.next() {
        if c.is_ascii_digit() {
            while chars
                .peek()
                .is_some_and(|&d| d.is_ascii_digit() || d == '_' || d == ',')
            {
                chars.next();
            }
            if chars.peek() == Some(&'.') {
                let mut ahead = chars.clone();
                ahead.next();
                if ahead.peek().is_some_and(|d| d.is_ascii_digit()) {
                    chars.next();
                    while chars.peek().is_some_and(|d| d.is_ascii_digit()) {
                        chars.next();
                    }
                }
            }
            out.push_str("<n>");
        } else {
            out.push(c);
        }
    }
    Some(out)
}

fn quote_pair(c: char) -> Option<char> {
    match c {
        '\'' => Some('\''),
        '"' => Some('"'),
        '`' => Some('`'),
        '‘' => Some('’'),
        '“' => Some('”'),
        '«' => Some('»'),
        _ => None,
    }
}

/// Letters, digits and the marks that hold an id or a number together.
fn is_word(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// `-`, `.`, `:`, `@`, `+` and `/` inside a word (`INV-2026-00042`, `1.5`, `a@b.c`,
/// `10:30:00`), not at its end.
fn joins_word(chars: &[char], i: usize) -> bool {
    matches!(chars[i], '-' | '.' | ':' | '@' | '+')
        && i > 0
        && is_word(chars[i - 1])
        && chars.get(i + 1).is_some_and(|&c| is_word(c))
}

fn is_query_end(c: char) -> bool {
    c == '&' || c == '#' || c.is_whitespace() || matches!(c, '"' | '\'' | ')' | ']' | '>' | ',')
}

/// The end of `name` in `name=value` starting at `at`, when that is what follows.
fn query_param(chars: &[char], at: usize) -> Option<usize> {
    let mut i = at;
    while i < chars.len()
        && (chars[i].is_alphanumeric() || matches!(chars[i], '_' | '-' | '.' | '[' | ']'))
    {
        i += 1;
    }
    (i > at && chars.get(i) == Some(&'=')).then_some(i)
}

fn is_uuid(word: &str) -> bool {
    let groups: Vec<&str> = word.split('-').collect();
    groups.len() == 5
        && groups
            .iter()
            .zip([8, 4, 4, 4, 12])
            .all(|(g, n)| g.len() == n && g.bytes().all(|b| b.is_ascii_hexdigit()))
}

fn is_email(word: &str) -> bool {
    match word.split_once('@') {
        Some((local, domain)) => !local.is_empty() && domain.contains('.') && !domain.contains('@'),
        None => false,
    }
}

/// A date, a time of day or both (`2026-12-06`, `10:30:00`, `2026-12-06T10:30:00.123+01:00`).
fn is_time(word: &str) -> bool {
    let shape: String = word
        .chars()
        .map(|c| if c.is_ascii_digit() { '9' } else { c })
        .collect();
    let date = |s: &str| s.len() == 10 && s.as_bytes()[4] == b'-' && s.as_bytes()[7] == b'-';
    let clock = |s: &str| s.starts_with("99:99");
    date(shape.get(..10).unwrap_or_default()) && shape.chars().all(|c| "9-:.TZ+".contains(c))
        || clock(&shape) && shape.chars().all(|c| "9:.".contains(c))
}

/// `0x1f3a`, or a run of 8 or more hex digits with at least one digit and one letter (a hash,
/// an object id, an address).
fn is_hex(word: &str) -> bool {
    if let Some(rest) = word.strip_prefix("0x") {
        return !rest.is_empty() && rest.bytes().all(|b| b.is_ascii_hexdigit());
    }
    word.len() >= 8
        && word.bytes().all(|b| b.is_ascii_hexdigit())
        && word.bytes().any(|b| b.is_ascii_digit())
        && word.bytes().any(|b| b.is_ascii_alphabetic())
}

/// Whitespace runs as one space, and the template cut at [`MAX_TEMPLATE_CHARS`].
fn collapse(text: String) -> String {
    let mut out = String::with_capacity(text.len());
    for word in text.split_whitespace() {
        if !out.is_empty() {
            out.push(' ');
        }
        out.push_str(word);
    }
    out.chars().take(MAX_TEMPLATE_CHARS).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_numbers_and_values_become_placeholders() {
        for (message, expected) in [
            ("no customer with id C-1007", "no customer with id C-<n>"),
            ("no customer with id C-1017", "no customer with id C-<n>"),
            (
                "invoice INV-2026-00042 is closed",
                "invoice INV-<n>-<n> is closed",
            ),
            ("timed out after 30000 ms", "timed out after <n> ms"),
            ("timed out after 1.5s", "timed out after <n>s"),
            (
                "request 3f2b8c1e-9a4d-4e2b-8f3a-1c2d3e4f5a6b failed",
                "request <uuid> failed",
            ),
            (
                "mail to ana.lima@example.com bounced",
                "mail to <email> bounced",
            ),
            (
                "object 5f1d7a9c2b3e4f60 not found",
                "object <hex> not found",
            ),
            ("pointer 0x7ffee4b2a9c0", "pointer <hex>"),
            ("key 'INV-9' missing", "key '<value>' missing"),
            (
                r#"field "vat_id" is required"#,
                r#"field "<value>" is required"#,
            ),
            (
                "GET https://api.example.com/v1/tax?country=DE&amount=10.5 returned 503",
                "GET https://api.example.com/v<n>/tax?country=<value>&amount=<value> returned <n>",
            ),
            (
                "at 2026-12-06T10:30:00Z the lock expired",
                "at <time> the lock expired",
            ),
            ("slot 10:30 taken", "slot <time> taken"),
            ("token a1b2c3x4y5 rejected", "token <id> rejected"),
            ("digest a1b2c3d4e5 rejected", "digest <hex> rejected"),
            (
                "the customer's account can't pay",
                "the customer's account can't pay",
            ),
            ("Zürich  branch   closed", "Zürich branch closed"),
        ] {
            assert_eq!(template(message), expected, "{message}");
        }
    }

    #[test]
    fn words_without_digits_stay() {
        assert_eq!(
            template("NullPointerException in InvoiceService"),
            "NullPointerException in InvoiceService"
        );
        assert_eq!(template(""), "");
    }

    #[test]
    fn templates_are_bounded() {
        let long = "word ".repeat(1_000);
        assert_eq!(template(&long).chars().count(), MAX_TEMPLATE_CHARS);
        let numbers = "1 ".repeat(10_000);
        assert!(template(&numbers).chars().count() <= MAX_TEMPLATE_CHARS);
    }
}
