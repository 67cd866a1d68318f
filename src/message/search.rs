//! The search language of the list and the API's `q` (pure): free words, `prefix*` words,
//! `"quoted phrases"` and `field:value` terms (`queue:invoices.dlq`, `invoice:INV-2026-00042`,
//! `reason:"delivery_limit"`), all of which must match. Parsed into a [`Search`] the archive
//! turns into bound SQL; malformed input is a [`SearchError`] that says what to fix.

use std::fmt;

/// Longest query accepted: longer input is refused, not cut.
pub const MAX_QUERY_LEN: usize = 500;
/// Words, phrases, prefixes and fields one query may hold: each is a lookup of its own.
pub const MAX_TERMS: usize = 16;
/// `prefix*` words one query may hold: each expands to every indexed word it starts.
pub const MAX_PREFIXES: usize = 4;
/// Letters and digits a prefix needs: `a*` would expand to a good part of the index.
pub const MIN_PREFIX_CHARS: usize = 3;

/// Fields every archive knows; configured business fields (`--field`) come on top.
pub const BUILT_IN_FIELDS: [&str; 12] = [
    "queue",
    "vhost",
    "broker",
    "reason",
    "exchange",
    "routing_key",
    "status",
    "message_id",
    "correlation_id",
    "content_type",
    "first_death_queue",
    "error",
];

/// One `field:value` term.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FieldTerm {
    pub field: String,
    pub value: String,
    /// `field:value*` on a business field: any value with a word starting so.
    pub prefix: bool,
}

impl FieldTerm {
    /// Whether the field is a business field (`--field`), found by its words
    /// ([`crate::message::field_match`]); built-in fields compare whole values.
    pub fn is_business(&self) -> bool {
        !BUILT_IN_FIELDS.contains(&self.field.as_str())
    }
}

/// A parsed query: the text to find (words and phrases, all required) and the fields to match.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Search {
    pub words: Vec<String>,
    /// Words typed with a trailing `*`: any word starting so matches.
    pub prefixes: Vec<String>,
    pub phrases: Vec<String>,
    pub fields: Vec<FieldTerm>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SearchError {
    TooLong(usize),
    UnclosedQuote {
        at: usize,
    },
    EmptyValue {
        field: String,
    },
    /// NUL (`%00`): no message text holds it, and PostgreSQL's text cannot.
    Nul,
    TooManyTerms(usize),
    TooManyPrefixes(usize),
    ShortPrefix(String),
}

impl fmt::Display for SearchError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SearchError::TooLong(n) => write!(
                f,
                "the search is {n} characters long; at most {MAX_QUERY_LEN} are accepted"
            ),
            SearchError::UnclosedQuote { at } => write!(
                f,
                "the quote opened at character {} is never closed",
                at + 1
            ),
            SearchError::EmptyValue { field } => write!(
                f,
                "{field}: needs a value, as in {field}:something or {field}:\"two words\""
            ),
            SearchError::Nul => write!(
                f,
                "the search contains a NUL character (%00), which no message text holds"
            ),
            SearchError::TooManyTerms(n) => write!(
                f,
                "the search has {n} words, phrases and fields; at most {MAX_TERMS} are accepted: \
                 search for the few that tell the messages apart"
            ),
            SearchError::TooManyPrefixes(n) => write!(
                f,
                "the search has {n} prefix* words; at most {MAX_PREFIXES} are accepted"
            ),
            SearchError::ShortPrefix(p) => write!(
                f,
                "{p}* is too short a prefix: give at least {MIN_PREFIX_CHARS} letters or digits \
                 before the *"
            ),
        }
    }
}

impl std::error::Error for SearchError {}

impl Search {
    pub fn is_empty(&self) -> bool {
        self.words.is_empty()
            && self.prefixes.is_empty()
            && self.phrases.is_empty()
            && self.fields.is_empty()
    }

    /// The text to find, for the archive's full-text index (`None`: no text to find). CJK
    /// runs are asked for as the bigrams the index holds ([`crate::message::cjk`]); a lone CJK letter
    /// as the start of one.
    pub fn text_query(&self) -> Option<TextQuery> {
        let indexed = |s: &String| crate::message::cjk::bigrams(s).into_owned();
        let (lone, words): (Vec<&String>, Vec<&String>) = self
            .words
            .iter()
            .partition(|w| crate::message::cjk::is_lone_letter(w));
        let text = TextQuery {
            phrases: self.phrases.iter().map(indexed).collect(),
            words: words.into_iter().map(indexed).collect(),
            prefixes: self.prefixes.iter().chain(lone).map(indexed).collect(),
        };
        (!text.is_empty()).then_some(text)
    }
}

/// The words, phrases and prefixes of a search, all required: what each backend's full-text
/// index is asked, rendered by the backend ([`TextQuery::fts5`] for SQLite, a `tsquery` for
/// PostgreSQL), so that nothing the user typed is ever parsed twice.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TextQuery {
    pub phrases: Vec<String>,
    pub words: Vec<String>,
    /// Words typed with a trailing `*`.
    pub prefixes: Vec<String>,
}

impl TextQuery {
    pub fn is_empty(&self) -> bool {
        self.phrases.is_empty() && self.words.is_empty() && self.prefixes.is_empty()
    }

    /// Every piece with whether it is a prefix, phrases first.
    pub fn pieces(&self) -> impl Iterator<Item = (&str, bool)> {
        self.phrases
            .iter()
            .chain(&self.words)
            .map(|p| (p.as_str(), false))
            .chain(self.prefixes.iter().map(|p| (p.as_str(), true)))
    }

    /// The FTS5 query: every piece a quoted FTS5 string, so nothing the user typed is FTS
    /// syntax, joined by an explicit `AND` (as the list's expanded prefixes need, see
    /// `archive::sqlite::terms`). Prefixes only where the user asked (`inv*`): expanding a
    /// common prefix over a million rows costs tens of ms.
    pub fn fts5(&self) -> String {
        let quote = |s: &str| format!("\"{}\"", s.replace('"', "\"\""));
        self.pieces()
            .map(|(piece, prefix)| match prefix {
                true => format!("{}*", quote(piece)),
                false => quote(piece),
            })
            .collect::<Vec<_>>()
            .join(" AND ")
    }
}

/// A word as the index keeps it: lowercased, diacritics removed (`Zürich` → `zurich`), as
/// FTS5's `unicode61 remove_diacritics 2` folds it — for PostgreSQL's documents and queries
/// and for the hits a page marks.
pub fn fold(word: &str) -> String {
    use unicode_normalization::char::is_combining_mark;
    use unicode_normalization::UnicodeNormalization;
    // ASCII has nothing to decompose and lowercases byte by byte: the common case, cheaply.
    if word.is_ascii() {
        return word.to_ascii_lowercase();
    }
    word.nfd()
        .filter(|c| !is_combining_mark(*c))
        .flat_map(char::to_lowercase)
        .collect()
}

/// Parses a query; `business_fields` are the names configured with `--field`.
pub fn parse(input: &str, business_fields: &[String]) -> Result<Search, SearchError> {
    let chars = input.chars().count();
    if chars > MAX_QUERY_LEN {
        return Err(SearchError::TooLong(chars));
    }
    if input.contains('\0') {
        return Err(SearchError::Nul);
    }
    let mut search = Search::default();
    let chars: Vec<char> = input.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        if chars[i].is_whitespace() {
            i += 1;
            continue;
        }
        if chars[i] == '"' {
            let (phrase, next) = quoted(&chars, i)?;
            if !phrase.trim().is_empty() {
                search.phrases.push(phrase);
            }
            i = next;
            continue;
        }
        let start = i;
        while i < chars.len() && !chars[i].is_whitespace() && chars[i] != '"' {
            i += 1;
        }
        let token: String = chars[start..i].iter().collect();
        if let Some((name, rest)) = token.split_once(':') {
            let field = name.to_lowercase();
            let known = BUILT_IN_FIELDS.contains(&field.as_str())
                || business_fields
                    .iter()
                    .any(|f| f.eq_ignore_ascii_case(&field));
            if known {
                let value = if rest.is_empty() && chars.get(i) == Some(&'"') {
                    let (value, next) = quoted(&chars, i)?;
                    i = next;
                    value
                } else {
                    rest.to_owned()
                };
                if value.is_empty() {
                    return Err(SearchError::EmptyValue { field });
                }
                let mut term = FieldTerm {
                    field,
                    value,
                    prefix: false,
                };
                // `customer:acme*`: a business field's value with a word starting so. (A
                // quoted value keeps its `*`, and built-in fields compare whole values.)
                if term.is_business() && !rest.is_empty() && term.value.ends_with('*') {
                    let core = term.value.trim_end_matches('*');
                    let letters = core.chars().filter(|c| c.is_alphanumeric()).count();
                    if letters < MIN_PREFIX_CHARS && !core.chars().any(crate::message::cjk::is_cjk)
                    {
                        return Err(SearchError::ShortPrefix(format!("{}:{core}", term.field)));
                    }
                    term.value = core.to_owned();
                    term.prefix = true;
                }
                search.fields.push(term);
                continue;
            }
            // Not a field: pasted text such as `NullPointerException:` or `09:30`.
        }
        push_text(&mut search, &token)?;
    }
    let terms =
        search.words.len() + search.prefixes.len() + search.phrases.len() + search.fields.len();
    if terms > MAX_TERMS {
        return Err(SearchError::TooManyTerms(terms));
    }
    let prefixes = search.prefixes.len() + search.fields.iter().filter(|t| t.prefix).count();
    if prefixes > MAX_PREFIXES {
        return Err(SearchError::TooManyPrefixes(prefixes));
    }
    Ok(search)
}

/// A word as typed, outer punctuation trimmed. Inner punctuation stays: FTS5 reads the
/// quoted `INV-2026-00042` as the phrase of its three tokens, in order. A trailing `*` asks
/// for a prefix, of at least [`MIN_PREFIX_CHARS`] letters or digits, or one CJK letter (each
/// says as much as a word: `死*` expands only to the bigrams starting with it).
fn push_text(search: &mut Search, token: &str) -> Result<(), SearchError> {
    let core = token.trim_matches(|c: char| !c.is_alphanumeric());
    if core.is_empty() {
        return Ok(());
    }
    if token.ends_with('*') {
        let letters = core.chars().filter(|c| c.is_alphanumeric()).count();
        if letters < MIN_PREFIX_CHARS && !core.chars().any(crate::message::cjk::is_cjk) {
            return Err(SearchError::ShortPrefix(core.to_owned()));
        }
        search.prefixes.push(core.to_owned());
    } else {
        search.words.push(core.to_owned());
    }
    Ok(())
}

/// The query again, as the language reads it (words, `prefix*`, phrases, then fields): what
/// a page shows of a search once its values have been masked.
impl fmt::Display for Search {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let quote = |s: &str| format!("\"{}\"", s.replace('"', "\\\""));
        let mut parts: Vec<String> = self.words.clone();
        parts.extend(self.prefixes.iter().map(|p| format!("{p}*")));
        parts.extend(self.phrases.iter().map(|p| quote(p)));
        parts.extend(self.fields.iter().map(|t| {
            let plain = !t.value.is_empty()
                && !t.value.contains(|c: char| c.is_whitespace() || c == '"')
                // A business value ending in `*` that is no prefix is quoted, so it reads
                // back as typed — but for a mask (`card:***`), which is only ever shown.
                && (t.prefix
                    || !t.value.ends_with('*')
                    || !t.is_business()
                    || t.value.trim_end_matches('*').is_empty());
            let star = if t.prefix { "*" } else { "" };
            match plain {
                true => format!("{}:{}{star}", t.field, t.value),
                false => format!("{}:{}{star}", t.field, quote(&t.value)),
            }
        }));
        f.write_str(&parts.join(" "))
    }
}

/// The text between the quote at `open` and its closing quote; `\"` is a literal quote.
fn quoted(chars: &[char], open: usize) -> Result<(String, usize), SearchError> {
    let mut out = String::new();
    let mut i = open + 1;
    while i < chars.len() {
        match chars[i] {
            '\\' if chars.get(i + 1) == Some(&'"') => {
                out.push('"');
                i += 2;
            }
            '"' => return Ok((out, i + 1)),
            c => {
                out.push(c);
                i += 1;
            }
        }
    }
    Err(SearchError::UnclosedQuote { at: open })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields() -> Vec<String> {
        vec!["invoice".into()]
    }

    #[test]
    fn words_phrases_and_fields() {
        let s = parse(
            r#"timeout "tax service" queue:billing.dlq invoice:INV-2026-00042"#,
            &fields(),
        )
        .unwrap();
        assert_eq!(s.words, ["timeout"]);
        assert_eq!(s.phrases, ["tax service"]);
        assert_eq!(
            s.fields,
            [
                FieldTerm {
                    field: "queue".into(),
                    value: "billing.dlq".into(),
                    prefix: false,
                },
                FieldTerm {
                    field: "invoice".into(),
                    value: "INV-2026-00042".into(),
                    prefix: false,
                },
            ]
        );
    }

    #[test]
    fn quoted_field_values_and_escaped_quotes() {
        let s = parse(
            r#"error:"NullPointerException: customer" "say \"hi\"""#,
            &[],
        )
        .unwrap();
        assert_eq!(s.fields[0].value, "NullPointerException: customer");
        assert_eq!(s.phrases, [r#"say "hi""#]);
    }

    #[test]
    fn the_fts5_query_quotes_everything() {
        let s = parse(r#"inv 2026 "a ""b" OR NEAR"#, &[]).unwrap();
        assert_eq!(
            s.text_query().unwrap().fts5(),
            r#""a " AND "b" AND "inv" AND "2026" AND "OR" AND "NEAR""#
        );
        assert_eq!(parse("queue:x", &[]).unwrap().text_query(), None);
    }

    #[test]
    fn a_trailing_star_asks_for_a_prefix() {
        let s = parse("INV-20* time*", &[]).unwrap();
        assert_eq!(s.prefixes, ["INV-20", "time"]);
        assert_eq!(s.text_query().unwrap().fts5(), r#""INV-20"* AND "time"*"#);
    }

    #[test]
    fn punctuated_words_stay_whole_so_their_tokens_stay_in_order() {
        assert_eq!(
            parse("INV-2026-00042", &[]).unwrap().words,
            ["INV-2026-00042"]
        );
        assert_eq!(
            parse("(tax), 'service'.", &[]).unwrap().words,
            ["tax", "service"]
        );
        assert!(parse("*** ((", &[]).unwrap().is_empty());
    }

    #[test]
    fn unknown_names_before_a_colon_are_text() {
        let s = parse("NullPointerException: at 09:30 colour:red", &fields()).unwrap();
        assert_eq!(
            s.words,
            ["NullPointerException", "at", "09:30", "colour:red"]
        );
        assert!(s.fields.is_empty());
    }

    #[test]
    fn malformed_queries_say_what_to_fix() {
        let err = |q: &str| parse(q, &fields()).unwrap_err().to_string();
        assert_eq!(
            err(r#"tax "service"#),
            "the quote opened at character 5 is never closed"
        );
        assert_eq!(
            err("queue:"),
            "queue: needs a value, as in queue:something or queue:\"two words\""
        );
        assert_eq!(
            err("invoice: x"),
            "invoice: needs a value, as in invoice:something or invoice:\"two words\""
        );
        assert!(err(&"x".repeat(501)).contains("at most 500"));
    }

    #[test]
    fn costly_searches_are_refused_with_what_to_do() {
        let err = |q: &str| parse(q, &fields()).unwrap_err();
        assert_eq!(err("a*"), SearchError::ShortPrefix("a".into()));
        assert_eq!(err("timeout in*"), SearchError::ShortPrefix("in".into()));
        let letters: Vec<String> = (b'a'..=b'z').map(|c| format!("{}*", c as char)).collect();
        assert!(err(&letters.join(" ")).to_string().contains("at least 3"));
        let words: Vec<String> = (0..17).map(|i| format!("w{i}")).collect();
        assert_eq!(err(&words.join(" ")), SearchError::TooManyTerms(17));
        assert_eq!(
            err("inv* tax* pay* ord* cus*"),
            SearchError::TooManyPrefixes(5)
        );
        assert_eq!(err("a\0b"), SearchError::Nul);
        assert!(parse("INV-20* tax* \"tax service\" queue:x", &fields()).is_ok());
    }

    #[test]
    fn a_search_reads_back_as_the_same_search() {
        let q = r#"timeout inv* "tax \"service\"" queue:billing.dlq error:"Null pointer""#;
        let s = parse(q, &fields()).unwrap();
        let again = s.to_string();
        assert_eq!(parse(&again, &fields()).unwrap(), s, "{again}");
    }

    #[test]
    fn cjk_runs_are_asked_for_as_phrases_of_bigrams() {
        let s = parse(r#"死信 "测试死信" 消息队列* 单 order queue:q"#, &[]).unwrap();
        let text = s.text_query().unwrap();
        assert_eq!(text.words, [" 死信 ", "order"]);
        assert_eq!(text.phrases, [" 测试 试死 死信 "]);
        assert_eq!(text.prefixes, [" 消息 息队 队列 ", " 单 "]);
        assert_eq!(
            text.fts5(),
            r#"" 测试 试死 死信 " AND " 死信 " AND "order" AND " 消息 息队 队列 "* AND " 单 "*"#
        );
        assert!(parse("死*", &[]).is_ok(), "one CJK letter is prefix enough");
        assert_eq!(
            s.to_string(),
            r#"死信 单 order 消息队列* "测试死信" queue:q"#
        );
    }

    #[test]
    fn a_business_field_takes_a_prefix_and_a_built_in_one_keeps_its_star() {
        let s = parse(r#"invoice:INV-2026* queue:odd* invoice:"a*""#, &fields()).unwrap();
        assert_eq!(
            (s.fields[0].value.as_str(), s.fields[0].prefix),
            ("INV-2026", true)
        );
        assert_eq!(
            (s.fields[1].value.as_str(), s.fields[1].prefix),
            ("odd*", false)
        );
        assert_eq!(
            (s.fields[2].value.as_str(), s.fields[2].prefix),
            ("a*", false)
        );
        assert_eq!(parse(&s.to_string(), &fields()).unwrap(), s, "{s}");
        assert_eq!(
            parse("invoice:in*", &fields()).unwrap_err(),
            SearchError::ShortPrefix("invoice:in".into())
        );
        assert_eq!(
            parse("invoice:inv* a* b* c* d*", &fields()).unwrap_err(),
            SearchError::ShortPrefix("a".into())
        );
        assert_eq!(
            parse("invoice:inv* aaa* bbb* ccc* ddd*", &fields()).unwrap_err(),
            SearchError::TooManyPrefixes(5)
        );
    }

    #[test]
    fn field_names_are_case_insensitive() {
        assert_eq!(
            parse("Queue:a INVOICE:b", &fields()).unwrap().fields.len(),
            2
        );
    }

    #[test]
    fn arbitrary_input_never_panics() {
        for q in [
            "\"", ":", "::", "a:\"", "\\\"", "\"\\", "é:ü", ":value", "a:b:c", "\"\"", "x:\"\"",
        ] {
            let _ = parse(q, &fields());
        }
    }
}
