//! How `field:value` finds a business field (`--field`) the way the rest of search finds
//! words (pure): case and accents folded, a word anywhere in the value (`customer:acme` in
//! "Acme Corp"), a phrase in order (`customer:"acme corp"`), a `prefix*`, and CJK runs
//! anywhere. Each value is stored as its keys — its folded words from each word to the end
//! ("acme corp", "corp") — so that every such search is one range of an index: the keys
//! that are the searched words, or start with them and a space (or, for a prefix, start with
//! them at all).

use crate::message::cjk::is_cjk;
use crate::message::search::fold;

/// Keys a value gets at most: its words from each of its first 16 words to the end. A phrase
/// starting further in is not found (a plain word search still finds the message).
pub const MAX_KEYS: usize = 16;
/// Bytes a key keeps at most, in whole words: an index entry stays small on both backends.
pub const MAX_KEY_BYTES: usize = 200;

/// The folded words of `text`, as the search index reads words: runs of letters and digits
/// (accents and case folded), each CJK letter a word of its own so that a run of them is
/// found inside a longer one.
pub fn words(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut word = String::new();
    for c in text.chars() {
        if is_cjk(c) {
            if !word.is_empty() {
                out.push(fold(&std::mem::take(&mut word)));
            }
            out.push(c.to_string());
        } else if c.is_alphanumeric() {
            word.push(c);
        } else if !word.is_empty() {
            out.push(fold(&std::mem::take(&mut word)));
        }
    }
    if !word.is_empty() {
        out.push(fold(&word));
    }
    // Folding can leave nothing of a word (a combining mark alone).
    out.retain(|w| !w.is_empty());
    out
}

/// The keys stored for a field's value: its words from each word to the end, joined by one
/// space, each at most [`MAX_KEY_BYTES`] in whole words.
pub fn keys(value: &str) -> Vec<String> {
    let words = words(value);
    let mut out: Vec<String> = Vec::new();
    for start in 0..words.len().min(MAX_KEYS) {
        let mut key = String::new();
        for word in &words[start..] {
            let extra = word.len() + usize::from(!key.is_empty());
            if key.len() + extra > MAX_KEY_BYTES {
                break;
            }
            if !key.is_empty() {
                key.push(' ');
            }
            key.push_str(word);
        }
        // A single word longer than the bound is kept cut (at a character boundary).
        if key.is_empty() {
            key = crate::message::body::prefix(&words[start], MAX_KEY_BYTES).to_owned();
        }
        if !out.contains(&key) {
            out.push(key);
        }
    }
    out
}

/// The range of keys `[low, high)` a search term matches: the words searched for, alone or
/// followed by more words — or, for a `prefix*`, followed by anything. `None` when the term
/// holds no word at all (`customer:"--"`): only the exact value can match it.
///
/// Keys hold no character below `!` but the space between words, so `words + "!"` bounds
/// "these words, then a space"; no key holds a character above U+10FFFF, which bounds
/// "anything after". Both backends compare the keys byte by byte (SQLite's `BINARY`, the
/// column's `COLLATE "C"` on PostgreSQL), in which UTF-8 keeps the order of code points.
pub fn term_range(value: &str, prefix: bool) -> Option<(String, String)> {
    let words = words(value);
    if words.is_empty() {
        return None;
    }
    let low = words.join(" ");
    let low = match low.len() > MAX_KEY_BYTES {
        // A key keeps this much of its words: a longer search asks for its start.
        true => crate::message::body::prefix(&low, MAX_KEY_BYTES).to_owned(),
        false => low,
    };
    let high = match prefix {
        true => format!("{low}\u{10FFFF}"),
        false => format!("{low}!"),
    };
    Some((low, high))
}

/// Whether a stored key falls in a term's range (what the databases compute; for tests).
#[cfg(test)]
fn matches(key: &str, (low, high): &(String, String)) -> bool {
    key.as_bytes() >= low.as_bytes() && key.as_bytes() < high.as_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn found(value: &str, term: &str, prefix: bool) -> bool {
        let range = term_range(term, prefix).unwrap();
        keys(value).iter().any(|k| matches(k, &range))
    }

    #[test]
    fn words_are_folded_and_cjk_letters_stand_alone() {
        assert_eq!(words("Zoë Café-Bar"), ["zoe", "cafe", "bar"]);
        assert_eq!(words("INV-2026-003100"), ["inv", "2026", "003100"]);
        assert_eq!(
            words("株式会社テスト"),
            ["株", "式", "会", "社", "テ", "ス", "ト"]
        );
        assert_eq!(words("ABC株式"), ["abc", "株", "式"]);
        assert!(words(" -- ").is_empty());
    }

    #[test]
    fn keys_run_from_each_word_to_the_end() {
        assert_eq!(keys("Acme Corp"), ["acme corp", "corp"]);
        assert_eq!(keys("a a"), ["a a", "a"]);
        let many = (0..40)
            .map(|i| format!("w{i}"))
            .collect::<Vec<_>>()
            .join(" ");
        assert_eq!(keys(&many).len(), MAX_KEYS);
        let long = "x".repeat(500);
        assert!(keys(&format!("{long} y"))
            .iter()
            .all(|k| k.len() <= MAX_KEY_BYTES));
        assert!(keys("").is_empty());
    }

    #[test]
    fn a_term_finds_whole_words_in_order_folded() {
        assert!(found("Acme Corp", "acme", false));
        assert!(found("Acme Corp", "ACME", false));
        assert!(found("Acme Corp", "corp", false));
        assert!(found("Acme Corp", "Acme Corp", false));
        assert!(!found("Acme Corp", "acm", false), "a word is whole");
        assert!(!found("Acme Corporation", "acme corp", false));
        assert!(
            !found("Acme Corp", "corp acme", false),
            "a phrase is in order"
        );
        assert!(found("Zoë Café", "zoe cafe", false));
        assert!(found("INV-2026-003100", "inv-2026-003100", false));
        assert!(!found("INV-2026-003100", "inv-2026-0031", false));
    }

    #[test]
    fn a_prefix_finds_the_start_of_a_word() {
        assert!(found("Northwind Traders", "north", true));
        assert!(found("Northwind Traders", "trad", true));
        assert!(found("INV-2026-003100", "inv-2026-0031", true));
        assert!(found("Acme Corporation", "acme corp", true));
        assert!(!found("Northwind", "wind", true));
    }

    #[test]
    fn cjk_runs_are_found_inside_longer_ones() {
        assert!(found("株式会社テスト商事", "テスト", false));
        assert!(found("株式会社テスト商事", "株式会社", false));
        assert!(!found("株式会社テスト商事", "テスト会社", false));
    }

    #[test]
    fn a_term_without_words_has_no_range() {
        assert_eq!(term_range("--", false), None);
    }
}
