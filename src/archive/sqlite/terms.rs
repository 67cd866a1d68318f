//! The words the SQLite search index holds (`search_terms`), so that a list search for a
//! `prefix*` asks FTS5 for the few words it stands for: FTS5 answers a prefix by merging the
//! whole posting list of every word it starts before the first row comes out (99 ms for
//! `pend*` over a million messages), and an `OR` of the same words a row at a time, newest
//! first (under 1 ms). The list is exact: every word FTS5 was given is in it — ASCII words
//! taken apart here as FTS5 takes them apart, anything else tokenized by FTS5 itself in a
//! scratch table — and it only grows (a word no message holds any more matches nothing).

use std::collections::BTreeSet;

use sqlx::SqliteConnection;

use crate::archive::SearchText;
use crate::message::search::TextQuery;

/// More words than this behind a prefix: FTS5's own prefix query is as fast as the `OR`.
const MAX_EXPANSION: usize = 64;

/// Shortest ASCII word a prefix query can reach ([`crate::message::search::MIN_PREFIX_CHARS`]).
const MIN_ASCII_TERM: usize = crate::message::search::MIN_PREFIX_CHARS;

/// The words of search entries as FTS5 indexes them: ASCII words here (lowercased, at least
/// [`MIN_ASCII_TERM`] long), and the text of every other word for FTS5 to split.
#[derive(Debug, Default)]
pub(super) struct Terms {
    ascii: BTreeSet<String>,
    /// Words with a character beyond ASCII, space-separated: FTS5's `unicode61` decides
    /// where they start and end (marks, private use and letters of newer Unicode versions
    /// are not for this file to guess).
    other: String,
}

impl Terms {
    pub fn add(&mut self, text: &SearchText) {
        for part in [&text.body, &text.ids, &text.headers] {
            if part.is_ascii() {
                // Most text: every piece is an ASCII word, none is left to FTS5.
                for word in part.split(|c: char| !c.is_ascii_alphanumeric()) {
                    self.add_ascii(word);
                }
                continue;
            }
            // ASCII punctuation and spaces separate words for FTS5 whatever surrounds them.
            for piece in part.split(|c: char| c.is_ascii() && !c.is_ascii_alphanumeric()) {
                if piece.is_ascii() {
                    self.add_ascii(piece);
                } else {
                    self.other.push_str(piece);
                    self.other.push(' ');
                }
            }
        }
    }

    /// An ASCII word, lowercased, if it is long enough (a copy only of a word not seen yet:
    /// the same queue, reason and field names come with every message).
    fn add_ascii(&mut self, word: &str) {
        if word.len() < MIN_ASCII_TERM {
            return;
        }
        if word.bytes().any(|b| b.is_ascii_uppercase()) {
            self.ascii.insert(word.to_ascii_lowercase());
        } else if !self.ascii.contains(word) {
            self.ascii.insert(word.to_owned());
        }
    }

    /// Adds the words to `search_terms`, in the caller's transaction.
    pub async fn save(self, conn: &mut SqliteConnection) -> Result<(), sqlx::Error> {
        if !self.ascii.is_empty() {
            let words: Vec<&String> = self.ascii.iter().collect();
            sqlx::query("INSERT OR IGNORE INTO search_terms (term) SELECT value FROM json_each(?)")
                .bind(serde_json::to_string(&words).expect("strings serialize"))
                .execute(&mut *conn)
                .await?;
        }
        if self.other.is_empty() {
            return Ok(());
        }
        // A scratch index of this connection's own, with the archive's tokenizer (see the
        // migration that made messages_fts), read through fts5vocab, then emptied.
        for statement in [
            "CREATE VIRTUAL TABLE IF NOT EXISTS temp.search_scratch USING fts5 (\
                 t, content = '', tokenize = 'unicode61 remove_diacritics 2')",
            "CREATE VIRTUAL TABLE IF NOT EXISTS temp.search_scratch_terms \
                 USING fts5vocab(temp, search_scratch, row)",
        ] {
            sqlx::query(statement).execute(&mut *conn).await?;
        }
        sqlx::query("INSERT INTO temp.search_scratch (t) VALUES (?)")
            .bind(&self.other)
            .execute(&mut *conn)
            .await?;
        sqlx::query(
            "INSERT OR IGNORE INTO search_terms (term) SELECT term FROM temp.search_scratch_terms",
        )
        .execute(&mut *conn)
        .await?;
        sqlx::query("INSERT INTO temp.search_scratch (search_scratch) VALUES ('delete-all')")
            .execute(&mut *conn)
            .await?;
        Ok(())
    }
}

/// The FTS5 query for a list search: as [`TextQuery::fts5`], but a `prefix*` of ASCII letters
/// and digits (or a lone CJK letter) asked as the `OR` of the words it starts, when there are
/// at most [`MAX_EXPANSION`] of them.
pub(super) async fn list_query(
    conn: &mut SqliteConnection,
    text: &TextQuery,
) -> Result<String, sqlx::Error> {
    let mut parts = Vec::new();
    for (piece, prefix) in text.pieces() {
        let quoted = quote(piece);
        let Some(start) = prefix.then(|| expandable(piece)).flatten() else {
            parts.push(match prefix {
                true => format!("{quoted}*"),
                false => quoted,
            });
            continue;
        };
        // Every word from `start` up to (not including) `start` followed by the highest
        // character: those that begin with it, in SQLite's byte order.
        let words: Vec<String> = sqlx::query_scalar(
            "SELECT term FROM search_terms WHERE term >= ?1 AND term < ?2 ORDER BY term LIMIT ?3",
        )
        .bind(&start)
        .bind(format!("{start}\u{10FFFF}"))
        .bind(MAX_EXPANSION as i64 + 1)
        .fetch_all(&mut *conn)
        .await?;
        parts.push(match words.len() {
            1..=MAX_EXPANSION => {
                let words: Vec<String> = words.iter().map(|w| quote(w)).collect();
                format!("({})", words.join(" OR "))
            }
            _ => format!("{quoted}*"),
        });
    }
    // An explicit AND: FTS5 joins phrases side by side implicitly, but not a parenthesised
    // `OR` beside anything (`(a OR b) c` is a syntax error).
    Ok(parts.join(" AND "))
}

/// The word a prefix starts, as the index folds it, when that is certain: ASCII letters and
/// digits lowercased, or one CJK letter as it is.
fn expandable(piece: &str) -> Option<String> {
    if !piece.is_empty() && piece.bytes().all(|b| b.is_ascii_alphanumeric()) {
        return Some(piece.to_ascii_lowercase());
    }
    let mut chars = piece.chars();
    match (chars.next(), chars.next()) {
        (Some(c), None) if crate::message::cjk::is_cjk(c) => Some(piece.to_owned()),
        _ => None,
    }
}

fn quote(s: &str) -> String {
    format!("\"{}\"", s.replace('"', "\"\""))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ascii_words_are_taken_here_and_the_rest_left_to_fts5() {
        let mut terms = Terms::default();
        terms.add(&SearchText {
            body: r#"{"note":"Payment PENDING in Zürich","id":"INV-2026-00042","x":"e\u0301tude"}"#
                .into(),
            // All ASCII (the fast path): mixed case, words seen already.
            ids: "msg-1 ab MSG-2 Payment".into(),
            headers: "測試死信 résumé".into(),
            snippet: None,
        });
        let ascii: Vec<&str> = terms.ascii.iter().map(String::as_str).collect();
        assert_eq!(
            ascii,
            [
                "00042",
                "2026",
                "inv",
                "msg",
                "note",
                "payment",
                "pending",
                "u0301tude"
            ],
            "lowercased, at least three long; no word with a character beyond ASCII"
        );
        assert_eq!(terms.other, "Zürich 測試死信 résumé ");
    }

    #[test]
    fn only_certain_prefixes_are_expanded() {
        assert_eq!(expandable("Pend").as_deref(), Some("pend"));
        assert_eq!(expandable("死").as_deref(), Some("死"));
        assert_eq!(expandable("Zür"), None);
        assert_eq!(expandable("inv-20"), None);
        assert_eq!(expandable("死信"), None);
    }
}
