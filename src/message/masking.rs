//! What `--mask` hides, in any JSON text (pure): the values at the masked JSON pointers
//! become `"***"` in one pass over the text, with an explicit stack instead of recursion and
//! without building the document as a tree — a body of any depth costs only its path, of any
//! size only its copy. A text that is not JSON (after an optional byte order mark) is
//! refused: what cannot be masked is neither shown to viewers nor indexed.

/// What a masked value reads as.
pub const MASK: &str = "***";

/// Bodies are decoded (content-encoding, charset) up to this size to be masked; a larger
/// one cannot be masked, so viewers do not see it and the word index does not hold it.
pub const MAX_MASKED_BODY: usize = 8 * 1024 * 1024;

/// One reference token of a pointer, with the array index it names when it names one.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Token {
    name: String,
    index: Option<usize>,
}

/// The masked JSON pointers (RFC 6901), parsed once.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Pointers(Vec<Vec<Token>>);

/// Why a `--mask` value is not a JSON pointer.
pub fn check_pointer(pointer: &str) -> Result<String, String> {
    if pointer.starts_with('/') {
        Ok(pointer.to_owned())
    } else {
        Err(format!(
            "{pointer:?} is not a JSON pointer (it starts with /, as in /card/number)"
        ))
    }
}

impl Pointers {
    pub fn new(pointers: &[String]) -> Self {
        Pointers(pointers.iter().filter_map(|p| parse(p)).collect())
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Whether a value at `pointer` is masked: the pointer itself is, or lies inside one
    /// that is (a business field extracted from a masked value).
    pub fn cover(&self, pointer: &str) -> bool {
        let Some(tokens) = parse(pointer) else {
            return false;
        };
        self.0
            .iter()
            .any(|p| p.len() <= tokens.len() && p.iter().zip(&tokens).all(|(a, b)| a == b))
    }

    fn matches(&self, path: &[Step]) -> bool {
        self.0.iter().any(|p| {
            p.len() == path.len()
                && p.iter().zip(path).all(|(token, step)| match step {
                    Step::Key(k) => token.name == *k,
                    Step::Index(i) => token.index == Some(*i),
                })
        })
    }
}

fn parse(pointer: &str) -> Option<Vec<Token>> {
    if pointer.is_empty() {
        return Some(Vec::new());
    }
    let tokens = pointer.strip_prefix('/')?.split('/').map(|raw| {
        let name = raw.replace("~1", "/").replace("~0", "~");
        // An index is written without sign or leading zero: `01` names a key, not item 1.
        let canonical = !name.is_empty()
            && name.bytes().all(|b| b.is_ascii_digit())
            && (name == "0" || !name.starts_with('0'));
        Token {
            index: canonical.then(|| name.parse().ok()).flatten(),
            name,
        }
    });
    Some(tokens.collect())
}

/// The text with every value at one of `pointers` replaced by `"***"` (every occurrence,
/// when a name repeats); `None` when it is not JSON. Everything else is kept as written.
pub fn mask_json(text: &str, pointers: &Pointers) -> Option<String> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let spans = masked_spans(text.as_bytes(), pointers)?;
    let mut out = String::with_capacity(text.len());
    let mut at = 0;
    for (start, end) in spans {
        out.push_str(&text[at..start]);
        out.push('"');
        out.push_str(MASK);
        out.push('"');
        at = end;
    }
    out.push_str(&text[at..]);
    Some(out)
}

/// The JSON text of the value at `pointer` in `text` (the last one, when a name repeats),
/// when `text` is JSON and holds one: found in the one pass masking makes, without building
/// the document (a megabyte of `[0,0,…]` as `serde_json::Value`s is 40 MiB).
pub fn value_at<'t>(text: &'t str, pointer: &str) -> Option<&'t str> {
    let pointers = Pointers::new(&[pointer.to_owned()]);
    if pointers.is_empty() {
        return None;
    }
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let spans = masked_spans(text.as_bytes(), &pointers)?;
    spans.last().map(|&(start, end)| &text[start..end])
}

/// Where a value sits in its container.
#[derive(Debug)]
enum Step {
    Key(String),
    Index(usize),
}

/// The byte ranges of the masked values, in order; `None` when the text is not JSON.
fn masked_spans(bytes: &[u8], pointers: &Pointers) -> Option<Vec<(usize, usize)>> {
    let mut s = Scanner { bytes, pos: 0 };
    // The path of the value being read, and the container (`{` or `[`) of each step.
    let mut path: Vec<Step> = Vec::new();
    let mut open: Vec<u8> = Vec::new();
    let mut spans = Vec::new();
    // The start and depth of the masked value being read (nothing inside it matters).
    let mut masking: Option<(usize, usize)> = None;
    s.whitespace();
    'value: loop {
        if masking.is_none() && pointers.matches(&path) {
            masking = Some((s.pos, path.len()));
        }
        match s.peek()? {
            b'{' => {
                s.pos += 1;
                s.whitespace();
                if s.eat(b'}').is_none() {
                    let key = s.key()?;
                    open.push(b'{');
                    path.push(Step::Key(key));
                    continue 'value;
                }
            }
            b'[' => {
                s.pos += 1;
                s.whitespace();
                if s.eat(b']').is_none() {
                    open.push(b'[');
                    path.push(Step::Index(0));
                    continue 'value;
                }
            }
            b'"' => {
                s.string(None)?;
            }
            b't' => s.literal(b"true")?,
            b'f' => s.literal(b"false")?,
            b'n' => s.literal(b"null")?,
            b'-' | b'0'..=b'9' => s.number()?,
            _ => return None,
        }
        // A value ended: close the containers it ends, up to the next value or the end.
        loop {
            if let Some((start, depth)) = masking {
                if depth == path.len() {
                    spans.push((start, s.pos));
                    masking = None;
                }
            }
            s.whitespace();
            let Some(&container) = open.last() else {
                return (s.pos == bytes.len()).then_some(spans);
            };
            match (container, s.peek()?) {
                (_, b',') => {
                    s.pos += 1;
                    s.whitespace();
                    match path.last_mut()? {
                        Step::Index(i) => *i += 1,
                        Step::Key(k) => *k = s.key()?,
                    }
                    continue 'value;
                }
                (b'{', b'}') | (b'[', b']') => {
                    s.pos += 1;
                    open.pop();
                    path.pop();
                }
                _ => return None,
            }
        }
    }
}

/// A cursor over JSON text that checks its grammar as it goes (RFC 8259).
struct Scanner<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl Scanner<'_> {
    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.pos).copied()
    }

    fn eat(&mut self, byte: u8) -> Option<()> {
        (self.peek()? == byte).then(|| self.pos += 1)
    }

    fn whitespace(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.pos += 1;
        }
    }

    fn literal(&mut self, word: &[u8]) -> Option<()> {
        self.bytes[self.pos..]
            .starts_with(word)
            .then(|| self.pos += word.len())
    }

    fn digits(&mut self) -> Option<()> {
        let start = self.pos;
        while matches!(self.peek(), Some(b'0'..=b'9')) {
            self.pos += 1;
        }
        (self.pos > start).then_some(())
    }

    fn number(&mut self) -> Option<()> {
        let _ = self.eat(b'-');
        match self.peek()? {
            b'0' => self.pos += 1,
            b'1'..=b'9' => self.digits()?,
            _ => return None,
        }
        if self.eat(b'.').is_some() {
            self.digits()?;
        }
        if matches!(self.peek(), Some(b'e' | b'E')) {
            self.pos += 1;
            if matches!(self.peek(), Some(b'+' | b'-')) {
                self.pos += 1;
            }
            self.digits()?;
        }
        Some(())
    }

    /// A member name, decoded, and the colon after it.
    fn key(&mut self) -> Option<String> {
        if self.peek()? != b'"' {
            return None;
        }
        let mut name = String::new();
        self.string(Some(&mut name))?;
        self.whitespace();
        self.eat(b':')?;
        self.whitespace();
        Some(name)
    }

    /// A string at the cursor, checked, and decoded into `out` when given.
    fn string(&mut self, mut out: Option<&mut String>) -> Option<()> {
        self.eat(b'"')?;
        loop {
            let run = self.pos;
            while matches!(self.peek(), Some(b) if b != b'"' && b != b'\\' && b >= 0x20) {
                self.pos += 1;
            }
            if let Some(out) = out.as_deref_mut() {
                // The text is UTF-8 and the run stops at ASCII: a boundary.
                out.push_str(std::str::from_utf8(&self.bytes[run..self.pos]).ok()?);
            }
            match self.peek()? {
                b'"' => {
                    self.pos += 1;
                    return Some(());
                }
                b'\\' => {
                    self.pos += 1;
                    let c = self.escape()?;
                    if let Some(out) = out.as_deref_mut() {
                        out.push(c);
                    }
                }
                _ => return None, // a control character
            }
        }
    }

    fn escape(&mut self) -> Option<char> {
        let c = match self.peek()? {
            b'"' => '"',
            b'\\' => '\\',
            b'/' => '/',
            b'b' => '\u{8}',
            b'f' => '\u{c}',
            b'n' => '\n',
            b'r' => '\r',
            b't' => '\t',
            b'u' => {
                self.pos += 1;
                let unit = self.hex4()?;
                return match unit {
                    0xD800..=0xDBFF => {
                        self.literal(b"\\u")?;
                        let low = self.hex4()?;
                        if !(0xDC00..=0xDFFF).contains(&low) {
                            return None;
                        }
                        char::from_u32(0x10000 + ((unit - 0xD800) << 10) + (low - 0xDC00))
                    }
                    0xDC00..=0xDFFF => None,
                    _ => char::from_u32(unit),
                };
            }
            _ => return None,
        };
        self.pos += 1;
        Some(c)
    }

    fn hex4(&mut self) -> Option<u32> {
        let digits = self.bytes.get(self.pos..self.pos + 4)?;
        let text = std::str::from_utf8(digits).ok()?;
        if !text.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        self.pos += 4;
        u32::from_str_radix(text, 16).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn mask(text: &str, pointers: &[&str]) -> Option<String> {
        let pointers: Vec<String> = pointers.iter().map(|p| p.to_string()).collect();
        mask_json(text, &Pointers::new(&pointers))
    }

    #[test]
    fn values_at_the_pointers_are_masked_and_the_rest_kept_as_written() {
        let text = r#"{"card": {"number": "4111", "exp": "12/29"}, "email":"a@b.c" , "n": [1, 2]}"#;
        assert_eq!(
            mask(text, &["/card/number", "/email", "/absent", "/n/1"]).unwrap(),
            r#"{"card": {"number": "***", "exp": "12/29"}, "email":"***" , "n": [1, "***"]}"#
        );
        assert_eq!(
            mask(r#"{"card": {"number": 4111}}"#, &["/card"]).unwrap(),
            r#"{"card": "***"}"#
        );
        assert_eq!(mask(r#"[1, {"a": 2}]"#, &[""]).unwrap(), r#""***""#);
        assert_eq!(mask("  {}  ", &["/a"]).unwrap(), "  {}  ");
    }

    #[test]
    fn names_are_compared_decoded_and_every_repeat_is_masked() {
        assert_eq!(
            mask(r#"{"c\u0061rd": "4111", "card": "4111"}"#, &["/card"]).unwrap(),
            r#"{"c\u0061rd": "***", "card": "***"}"#
        );
        assert_eq!(
            mask(r#"{"a/b": {"~x": 1}}"#, &["/a~1b/~0x"]).unwrap(),
            r#"{"a/b": {"~x": "***"}}"#
        );
        assert_eq!(
            mask(r#"{"\ud83d\ude00": 1}"#, &["/😀"]).unwrap(),
            r#"{"\ud83d\ude00": "***"}"#
        );
        // `01` is a name, not an index.
        assert_eq!(mask("[1, 2]", &["/01"]).unwrap(), "[1, 2]");
        assert_eq!(mask(r#"{"01": 1}"#, &["/01"]).unwrap(), r#"{"01": "***"}"#);
    }

    #[test]
    fn a_byte_order_mark_and_any_depth_are_fine() {
        assert_eq!(
            mask("\u{feff}{\"card\": 1}", &["/card"]).unwrap(),
            "{\"card\": \"***\"}"
        );
        let depth = 200_000;
        let deep = format!(
            "{{\"card\": 1, \"deep\": {}{}}}",
            "[".repeat(depth),
            "]".repeat(depth)
        );
        let masked = mask(&deep, &["/card"]).unwrap();
        assert!(masked.starts_with("{\"card\": \"***\""));
        let mut pointer = "/deep".to_owned();
        let mut nested = "{\"x\": 1}".to_owned();
        for _ in 0..1000 {
            nested = format!("[{nested}]");
            pointer.push_str("/0");
        }
        pointer.push_str("/x");
        let text = format!("{{\"deep\": {nested}}}");
        assert!(!mask(&text, &[&pointer]).unwrap().contains(": 1"));
    }

    #[test]
    fn what_is_not_json_is_refused() {
        for bad in [
            "",
            "card 4111",
            "{\"a\": 1,}",
            "[1,]",
            "{\"a\" 1}",
            "{\"a\": 01}",
            "{\"a\": -}",
            "{\"a\": 1.}",
            "{\"a\": 1e}",
            "{\"a\": tru}",
            "{\"a\": \"\\x\"}",
            "{\"a\": \"\\ud800\"}",
            "{\"a\": \"\\udc00\"}",
            "{\"a\": \"\\u12\"}",
            "{\"a\": \"tab\there\"}",
            "{\"a\": 1} x",
            "{\"a\": 1",
            "[[1]",
            "[1]]",
            "{1: 2}",
            "\"unclosed",
        ] {
            assert_eq!(mask(bad, &["/a"]), None, "{bad:?}");
        }
    }

    #[test]
    fn values_are_found_at_their_pointer_as_written() {
        let text = r#"{"a": {"b": [1, "x\"y"]}, "n": 1e3, "a2": true, "d": 1, "d": 2}"#;
        assert_eq!(value_at(text, "/a/b/1"), Some(r#""x\"y""#));
        assert_eq!(value_at(text, "/a/b"), Some(r#"[1, "x\"y"]"#));
        assert_eq!(value_at(text, "/n"), Some("1e3"));
        assert_eq!(
            value_at(text, "/d"),
            Some("2"),
            "the last of a repeated name"
        );
        assert_eq!(value_at(text, "/absent"), None);
        assert_eq!(value_at("{\"a\": 1,}", "/a"), None, "not JSON");
        assert_eq!(value_at(text, "a"), None, "not a pointer");
    }

    #[test]
    fn business_fields_inside_masked_values_are_covered() {
        let p = Pointers::new(&["/card".into(), "/a~1b".into()]);
        assert!(p.cover("/card") && p.cover("/card/number") && p.cover("/a~1b/c"));
        assert!(!p.cover("/cards") && !p.cover("/order") && !p.cover("/a/b"));
        assert!(check_pointer("card").is_err() && check_pointer("/card").is_ok());
    }

    fn json_value() -> impl Strategy<Value = serde_json::Value> {
        let leaf = prop_oneof![
            Just(serde_json::Value::Null),
            any::<bool>().prop_map(serde_json::Value::Bool),
            any::<i64>().prop_map(|n| serde_json::json!(n)),
            "[a-z\"\\\\/\u{0}-\u{1f}é😀]{0,8}".prop_map(serde_json::Value::String),
        ];
        leaf.prop_recursive(6, 64, 6, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..6).prop_map(serde_json::Value::Array),
                prop::collection::btree_map("[a-c~/]{0,3}", inner, 0..6)
                    .prop_map(|m| serde_json::Value::Object(m.into_iter().collect())),
            ]
        })
    }

    /// Every path of a value, as a pointer.
    fn pointers_of(v: &serde_json::Value, at: String, out: &mut Vec<String>) {
        out.push(at.clone());
        match v {
            serde_json::Value::Array(items) => {
                for (i, item) in items.iter().enumerate() {
                    pointers_of(item, format!("{at}/{i}"), out);
                }
            }
            serde_json::Value::Object(map) => {
                for (k, item) in map {
                    let token = k.replace('~', "~0").replace('/', "~1");
                    pointers_of(item, format!("{at}/{token}"), out);
                }
            }
            _ => {}
        }
    }

    proptest! {
        #[test]
        fn masks_as_a_parsed_tree_would(
            value in json_value(),
            pick in prop::collection::vec(any::<prop::sample::Index>(), 0..3),
            pretty in any::<bool>(),
        ) {
            let mut all = Vec::new();
            pointers_of(&value, String::new(), &mut all);
            let chosen: Vec<String> = pick.iter().map(|i| i.get(&all).clone()).collect();
            let text = if pretty {
                serde_json::to_string_pretty(&value).unwrap()
            } else {
                serde_json::to_string(&value).unwrap()
            };
            let masked = mask_json(&text, &Pointers::new(&chosen)).expect("serde's JSON is JSON");
            let mut expected = value.clone();
            // Outer pointers first: a value inside a masked one is gone with it.
            let mut sorted = chosen.clone();
            sorted.sort_by_key(|p| p.len());
            for p in &sorted {
                if let Some(v) = expected.pointer_mut(p) {
                    *v = serde_json::Value::String(MASK.into());
                }
            }
            let got: serde_json::Value = serde_json::from_str(&masked).unwrap();
            prop_assert_eq!(got, expected);
        }

        #[test]
        fn refuses_exactly_what_serde_refuses(text in "[\\[\\]{}\":,0-9.eE+\\-a-z \\\\u]{0,24}") {
            let ours = mask_json(&text, &Pointers::new(&["/a".into()])).is_some();
            let theirs = serde_json::from_str::<serde::de::IgnoredAny>(&text).is_ok();
            // serde refuses numbers it cannot hold; JSON does not.
            let out_of_range = serde_json::from_str::<serde::de::IgnoredAny>(&text)
                .err()
                .is_some_and(|e| e.to_string().contains("out of range"));
            prop_assert!(ours == theirs || (ours && out_of_range), "{:?}: ours {} serde {}", text, ours, theirs);
        }
    }
}
