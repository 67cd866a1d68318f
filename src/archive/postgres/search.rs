//! Full-text search on PostgreSQL with SQLite's rules (pure): the documents (`tsvector`) and
//! queries (`tsquery`) are built here, token by token, as FTS5's `unicode61 remove_diacritics
//! 2` tokenizer splits and folds them, so a search finds the same messages on both backends.
//! No PostgreSQL text-search configuration is involved: lexemes are stored and matched as is.

use std::collections::BTreeMap;
use std::fmt::Write;

use crate::archive::SearchText;
use crate::message::search::TextQuery;

/// PostgreSQL keeps positions up to this; later tokens share it (phrases there may not match).
const MAX_POSITION: u32 = 16_383;
/// PostgreSQL keeps at most this many positions per lexeme.
const MAX_POSITIONS_PER_LEXEME: usize = 256;
/// Longest lexeme PostgreSQL accepts is 2,047 bytes; longer tokens are cut (on a char).
const MAX_LEXEME_BYTES: usize = 2_000;

/// Letters and digits make tokens; everything else separates them. Tokens are lowercased and
/// their diacritics removed (`Zürich` → `zurich`).
pub fn tokens(text: &str) -> impl Iterator<Item = String> + '_ {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|t| !t.is_empty())
        .map(fold)
}

fn fold(token: &str) -> String {
    let mut out = crate::message::search::fold(token);
    out.truncate(crate::message::body::prefix(&out, MAX_LEXEME_BYTES).len());
    out
}

/// `'lexeme'`, quoted for a `tsvector` or `tsquery` literal.
fn quote(lexeme: &str) -> String {
    if !lexeme.contains(['\\', '\'']) {
        return format!("'{lexeme}'");
    }
    format!("'{}'", lexeme.replace('\\', "\\\\").replace('\'', "''"))
}

/// The `tsvector` literal of a message's searchable text. The three parts are numbered as one
/// sequence with a gap between them, so a phrase never spans two parts (as in FTS5's columns).
pub fn document(text: &SearchText) -> String {
    let mut positions: BTreeMap<String, Vec<u32>> = BTreeMap::new();
    let mut next = 1u32;
    for part in [&text.body, &text.ids, &text.headers] {
        for token in tokens(part) {
            let at = positions.entry(token).or_default();
            if at.len() < MAX_POSITIONS_PER_LEXEME {
                at.push(next.min(MAX_POSITION));
            }
            next = next.saturating_add(1);
        }
        next = next.saturating_add(1);
    }
    let mut out = String::new();
    for (lexeme, at) in positions {
        if !out.is_empty() {
            out.push(' ');
        }
        out.push_str(&quote(&lexeme));
        out.push(':');
        let mut last = 0;
        let mut first = true;
        for p in at {
            // Clamped positions repeat; a tsvector keeps each once.
            if p == last {
                continue;
            }
            if !first {
                out.push(',');
            }
            let _ = write!(out, "{p}");
            last = p;
            first = false;
        }
    }
    out
}

/// The `tsquery` literal for a search's text: every piece required, its tokens in order, the
/// last one a prefix where the user asked. Pieces without tokens are left out, as FTS5 does;
/// `None` when nothing is left (nothing matches).
pub fn query(text: &TextQuery) -> Option<String> {
    let parts: Vec<String> = text
        .pieces()
        .filter_map(|(piece, prefix)| {
            let tokens: Vec<String> = tokens(piece).map(|t| quote(&t)).collect();
            let (last, rest) = tokens.split_last()?;
            let mut out: Vec<String> = rest.to_vec();
            out.push(if prefix {
                format!("{last}:*")
            } else {
                last.clone()
            });
            Some(format!("({})", out.join(" <-> ")))
        })
        .collect();
    (!parts.is_empty()).then(|| parts.join(" & "))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::search;

    fn text(body: &str) -> SearchText {
        SearchText {
            body: body.into(),
            ids: "INV-1".into(),
            headers: "it's\\here".into(),
            snippet: None,
        }
    }

    #[test]
    fn tokens_split_on_punctuation_and_fold_case_and_diacritics() {
        let t: Vec<String> = tokens("Zürich café: INV-2026-00042, Kraków!").collect();
        assert_eq!(t, ["zurich", "cafe", "inv", "2026", "00042", "krakow"]);
    }

    #[test]
    fn documents_number_tokens_with_a_gap_between_parts() {
        assert_eq!(
            document(&text("a b a")),
            "'1':6 'a':1,3 'b':2 'here':10 'inv':5 'it':8 's':9"
        );
    }

    #[test]
    fn quotes_and_backslashes_are_escaped() {
        assert_eq!(quote("it's\\"), "'it''s\\\\'");
    }

    fn searched(input: &str) -> TextQuery {
        search::parse(input, &[]).unwrap().text_query().unwrap()
    }

    #[test]
    fn queries_mirror_fts5_phrases_and_prefixes() {
        assert_eq!(
            query(&searched(r#"Timeout "INV-2026" zür* "--""#)).unwrap(),
            "('inv' <-> '2026') & ('timeout') & ('zur':*)"
        );
        assert_eq!(query(&searched(r#""--""#)), None);
        assert_eq!(
            query(&searched(r#""say \"hi\"""#)).unwrap(),
            "('say' <-> 'hi')"
        );
    }
}
