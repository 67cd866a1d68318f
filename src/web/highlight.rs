//! Search hits marked in what a page shows (pure): the words, prefixes and phrases of the
//! search that led to a message, found in its payload the way the index finds them — whole
//! words (case and accents folded), `prefix*` as the start of a word, and Chinese, Japanese
//! and Korean as the run of characters anywhere.

use std::ops::Range;

use crate::cjk::is_cjk;
use crate::search::{fold, Search};

/// What to mark, from a search.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Terms {
    /// Folded words, each with whether it is a prefix.
    words: Vec<(String, bool)>,
    /// Runs of CJK letters, found anywhere.
    runs: Vec<String>,
}

impl Terms {
    pub fn new(search: &Search) -> Self {
        let mut terms = Terms::default();
        let pieces = search
            .words
            .iter()
            .chain(&search.phrases)
            .map(|p| (p, false))
            .chain(search.prefixes.iter().map(|p| (p, true)));
        for (piece, prefix) in pieces {
            let words: Vec<&str> = piece
                .split(|c: char| !c.is_alphanumeric())
                .filter(|w| !w.is_empty())
                .collect();
            let last = words.len().saturating_sub(1);
            for (i, word) in words.into_iter().enumerate() {
                // CJK runs inside a word stand alone; the letters around them are words.
                let mut latin = String::new();
                let mut run = String::new();
                for c in word.chars().chain(std::iter::once(' ')) {
                    if is_cjk(c) {
                        run.push(c);
                        continue;
                    }
                    if !run.is_empty() {
                        terms.runs.push(std::mem::take(&mut run));
                    }
                    if c.is_alphanumeric() {
                        latin.push(c);
                    }
                }
                if !latin.is_empty() {
                    terms.words.push((fold(&latin), prefix && i == last));
                }
            }
        }
        terms
    }

    pub fn is_empty(&self) -> bool {
        self.words.is_empty() && self.runs.is_empty()
    }

    /// The byte ranges of `text` to mark, in order, not overlapping.
    pub fn ranges(&self, text: &str) -> Vec<Range<usize>> {
        let mut out: Vec<Range<usize>> = Vec::new();
        if self.is_empty() {
            return out;
        }
        for run in &self.runs {
            out.extend(
                text.match_indices(run.as_str())
                    .map(|(at, m)| at..at + m.len()),
            );
        }
        if !self.words.is_empty() {
            let mut start = None;
            for (at, c) in text
                .char_indices()
                .chain(std::iter::once((text.len(), ' ')))
            {
                let letter = c.is_alphanumeric() && !is_cjk(c);
                match (start, letter) {
                    (None, true) => start = Some(at),
                    (Some(from), false) => {
                        let word = fold(&text[from..at]);
                        let hit = self.words.iter().any(|(w, prefix)| match prefix {
                            true => word.starts_with(w.as_str()),
                            false => &word == w,
                        });
                        if hit {
                            out.push(from..at);
                        }
                        start = None;
                    }
                    _ => {}
                }
            }
        }
        out.sort_by_key(|r| (r.start, std::cmp::Reverse(r.end)));
        let mut merged: Vec<Range<usize>> = Vec::new();
        for r in out {
            match merged.last_mut() {
                Some(last) if r.start <= last.end => last.end = last.end.max(r.end),
                _ => merged.push(r),
            }
        }
        merged
    }

    /// `text` cut into pieces, each with whether it is a hit.
    pub fn split(&self, text: &str) -> Vec<(String, bool)> {
        let mut out = Vec::new();
        let mut at = 0;
        for r in self.ranges(text) {
            if r.start > at {
                out.push((text[at..r.start].to_owned(), false));
            }
            out.push((text[r.clone()].to_owned(), true));
            at = r.end;
        }
        if at < text.len() || out.is_empty() {
            out.push((text[at..].to_owned(), false));
        }
        out
    }
}

/// A piece of shown text, and whether the search found it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Piece {
    pub text: String,
    pub hit: bool,
}

/// A payload token (its highlight class kept) cut into pieces.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Marked {
    pub class: &'static str,
    pub pieces: Vec<Piece>,
}

/// The payload's tokens with the search's hits marked (none in a hex dump), and how many.
pub fn mark(payload: &super::payload::PayloadView, terms: &Terms) -> (Vec<Marked>, usize) {
    let searchable = payload.kind != super::payload::PayloadKind::Hex;
    let mut hits = 0;
    let marked = payload
        .tokens
        .iter()
        .map(|token| {
            let pieces: Vec<Piece> = match searchable {
                true => terms.split(&token.text),
                false => vec![(token.text.clone(), false)],
            }
            .into_iter()
            .map(|(text, hit)| Piece { text, hit })
            .collect();
            hits += pieces.iter().filter(|p| p.hit).count();
            Marked {
                class: token.class,
                pieces,
            }
        })
        .collect();
    (marked, hits)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn terms(q: &str) -> Terms {
        Terms::new(&crate::search::parse(q, &[]).unwrap())
    }

    fn marked(q: &str, text: &str) -> Vec<String> {
        terms(q)
            .split(text)
            .into_iter()
            .filter(|(_, hit)| *hit)
            .map(|(s, _)| s)
            .collect()
    }

    #[test]
    fn whole_words_folded_and_prefixes() {
        assert_eq!(
            marked("zurich tax", "Zürich: taxes, TAX and tax-free"),
            ["Zürich", "TAX", "tax"]
        );
        assert_eq!(marked("tim*", "timeout at time"), ["timeout", "time"]);
        assert_eq!(
            marked("\"tax service\"", "the tax service"),
            ["tax", "service"]
        );
    }

    #[test]
    fn cjk_runs_anywhere_and_mixed_with_latin() {
        assert_eq!(marked("死信", "测试死信消息：订单ABC123处理失败"), ["死信"]);
        assert_eq!(marked("订单ABC123", "订单ABC123处理"), ["订单ABC123"]);
        assert_eq!(marked("決済", "カード決済エラー"), ["決済"]);
    }

    #[test]
    fn pieces_cover_the_text_exactly() {
        let text = "a 死信 b 死信";
        let pieces = terms("死信").split(text);
        assert_eq!(
            pieces.iter().map(|(s, _)| s.as_str()).collect::<String>(),
            text
        );
        assert_eq!(pieces.iter().filter(|(_, hit)| *hit).count(), 2);
        assert_eq!(terms("queue:x").split("abc"), [("abc".to_owned(), false)]);
    }
}
