//! Search hits marked in what a page shows (pure): the words, prefixes and phrases of the
//! search that led to a message, found in its payload the way the index finds them — whole
//! words (case and accents folded), phrases and punctuated words as their words in order,
//! `prefix*` as the start of a word, and Chinese, Japanese and Korean as the run of
//! characters anywhere. Each place found is one hit.

use std::ops::Range;

use crate::message::cjk::is_cjk;
use crate::message::search::{fold, Search};

/// What to mark, from a search.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Terms {
    /// Each word, phrase or prefix searched for as its folded words in order (a word with
    /// inner punctuation, `INV-2026-00042`, is three), and whether the last is a prefix.
    sequences: Vec<(Vec<String>, bool)>,
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
            let mut sequence = Vec::new();
            // CJK runs stand alone; the letters around them are the piece's words.
            let mut latin = String::new();
            let mut run = String::new();
            for c in piece.chars().chain(std::iter::once(' ')) {
                if is_cjk(c) {
                    if !latin.is_empty() {
                        sequence.push(fold(&std::mem::take(&mut latin)));
                    }
                    run.push(c);
                    continue;
                }
                if !run.is_empty() {
                    terms.runs.push(std::mem::take(&mut run));
                }
                if c.is_alphanumeric() {
                    latin.push(c);
                } else if !latin.is_empty() {
                    sequence.push(fold(&std::mem::take(&mut latin)));
                }
            }
            if !sequence.is_empty() {
                terms.sequences.push((sequence, prefix));
            }
        }
        terms
    }

    pub fn is_empty(&self) -> bool {
        self.sequences.is_empty() && self.runs.is_empty()
    }

    /// The byte ranges of `text` to mark, in order, not overlapping: each place a searched
    /// word, phrase or prefix stands — its words one after another, as the index finds a
    /// phrase — is one range, one hit.
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
        if !self.sequences.is_empty() {
            let words = words_of(text);
            for (sequence, prefix) in &self.sequences {
                let n = sequence.len();
                for start in 0..words.len().saturating_sub(n - 1) {
                    let found = sequence.iter().enumerate().all(|(k, w)| {
                        let word = &words[start + k].1;
                        match *prefix && k == n - 1 {
                            true => word.starts_with(w.as_str()),
                            false => word == w,
                        }
                    });
                    if found {
                        out.push(words[start].0.start..words[start + n - 1].0.end);
                    }
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

/// The words of `text` (runs of letters and digits other than CJK), folded, with where each
/// stands.
fn words_of(text: &str) -> Vec<(Range<usize>, String)> {
    let mut words = Vec::new();
    let mut start = None;
    for (at, c) in text
        .char_indices()
        .chain(std::iter::once((text.len(), ' ')))
    {
        let letter = c.is_alphanumeric() && !is_cjk(c);
        match (start, letter) {
            (None, true) => start = Some(at),
            (Some(from), false) => {
                words.push((from..at, fold(&text[from..at])));
                start = None;
            }
            _ => {}
        }
    }
    words
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
pub fn mark(
    payload: &crate::web::pages::payload::PayloadView,
    terms: &Terms,
) -> (Vec<Marked>, usize) {
    let searchable = payload.kind != crate::web::pages::payload::PayloadKind::Hex;
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
        Terms::new(&crate::message::search::parse(q, &[]).unwrap())
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
            ["tax service"]
        );
    }

    #[test]
    fn cjk_runs_anywhere_and_mixed_with_latin() {
        assert_eq!(marked("死信", "测试死信消息：订单ABC123处理失败"), ["死信"]);
        assert_eq!(marked("订单ABC123", "订单ABC123处理"), ["订单ABC123"]);
        assert_eq!(marked("決済", "カード決済エラー"), ["決済"]);
    }

    #[test]
    fn a_phrase_is_one_hit_where_its_words_stand_in_order() {
        let text = r#""INV-2026-003100", issued 2026-01-05"#;
        let pieces = terms("INV-2026-003100").split(text);
        let hits: Vec<&str> = pieces
            .iter()
            .filter(|(_, hit)| *hit)
            .map(|(s, _)| s.as_str())
            .collect();
        assert_eq!(hits, ["INV-2026-003100"]);
        assert_eq!(
            marked("\"tax service\" tax", "the tax service, tax"),
            ["tax service", "tax"]
        );
        assert_eq!(
            marked("\"service tax\"", "the tax service"),
            Vec::<String>::new()
        );
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
