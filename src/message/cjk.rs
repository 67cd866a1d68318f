//! Chinese, Japanese and Korean made findable by word search (pure). Their words are not
//! separated by spaces, and both search indexes (FTS5's `unicode61`, mirrored on PostgreSQL)
//! keep a run of such characters as one token, so `死信` never matched `测试死信消息`. Here
//! every run becomes its overlapping bigrams (`测试死信` → `测试 试死 死信`), in the text
//! indexed and in the text searched for alike: any substring of two or more characters is then
//! a phrase of bigrams the index holds, on both backends, with no tokenizer of their own.

use std::borrow::Cow;

/// Han (with its extensions and compatibility ideographs), Hiragana, Katakana and Hangul
/// letters: the characters that are written without spaces between words. Punctuation in
/// their blocks (`、`, `・`) separates words as any punctuation does.
pub fn is_cjk(c: char) -> bool {
    matches!(
        c as u32,
        0x1100..=0x11FF         // Hangul Jamo
            | 0x3040..=0x30FF   // Hiragana, Katakana
            | 0x3130..=0x318F   // Hangul compatibility Jamo
            | 0x31F0..=0x31FF   // Katakana phonetic extensions
            | 0x3400..=0x4DBF   // Han extension A
            | 0x4E00..=0x9FFF   // Han
            | 0xA960..=0xA97F   // Hangul Jamo extended A
            | 0xAC00..=0xD7FF   // Hangul syllables, Jamo extended B
            | 0xF900..=0xFAFF   // Han compatibility ideographs
            | 0xFF66..=0xFFDC   // halfwidth Katakana and Hangul
            | 0x20000..=0x3FFFF // Han extensions B and later
    ) && c.is_alphanumeric()
}

/// The text with every run of CJK letters as its overlapping bigrams, each a word of its
/// own; a lone CJK letter stays as it is. Text without any is returned as it is.
pub fn bigrams(text: &str) -> Cow<'_, str> {
    // Most text is ASCII, and no CJK letter is: that answer is a fast scan of the bytes.
    if text.is_ascii() || !text.chars().any(is_cjk) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() * 3);
    let mut run: Vec<char> = Vec::new();
    for c in text.chars() {
        if is_cjk(c) {
            run.push(c);
        } else {
            push_run(&mut run, &mut out);
            out.push(c);
        }
    }
    push_run(&mut run, &mut out);
    Cow::Owned(out)
}

fn push_run(run: &mut Vec<char>, out: &mut String) {
    if run.is_empty() {
        return;
    }
    out.push(' ');
    if let [only] = run[..] {
        out.push(only);
    }
    for (i, pair) in run.windows(2).enumerate() {
        if i > 0 {
            out.push(' ');
        }
        out.extend(pair);
    }
    out.push(' ');
    run.clear();
}

/// Whether a typed word is one CJK letter, which no bigram equals: it is searched for as the
/// start of one (a prefix).
pub fn is_lone_letter(word: &str) -> bool {
    let mut letters = word.chars().filter(|c| c.is_alphanumeric());
    matches!((letters.next(), letters.next()), (Some(c), None) if is_cjk(c))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// How both indexes split text: letters and digits make tokens, case folded.
    fn tokens(text: &str) -> Vec<String> {
        text.split(|c: char| !c.is_alphanumeric())
            .filter(|t| !t.is_empty())
            .map(str::to_lowercase)
            .collect()
    }

    proptest! {
        #[test]
        fn any_part_of_a_run_is_a_phrase_the_index_holds(
            run in "[\u{4e00}-\u{9fff}\u{3041}-\u{3096}\u{30a1}-\u{30fa}\u{ac00}-\u{d7a3}]{2,12}",
            before in "[a-zA-Z0-9 .]{0,4}",
            after in "[a-zA-Z0-9 .]{0,4}",
            start in 0usize..11,
            len in 2usize..12,
        ) {
            let chars: Vec<char> = run.chars().collect();
            let start = start % (chars.len() - 1);
            let end = (start + len).min(chars.len());
            let part: String = chars[start..end].iter().collect();
            let indexed = tokens(&bigrams(&format!("{before}{run}{after}")));
            let asked = tokens(&bigrams(&part));
            prop_assert!(!asked.is_empty());
            prop_assert!(
                indexed.windows(asked.len()).any(|w| w == asked.as_slice()),
                "{:?} in {:?}", asked, indexed
            );
        }
    }

    #[test]
    fn runs_become_overlapping_bigrams_between_other_words() {
        assert_eq!(bigrams("测试死信消息"), " 测试 试死 死信 信消 消息 ");
        assert_eq!(
            bigrams("订单ABC-123失败了, ok"),
            " 订单 ABC-123 失败 败了 , ok"
        );
        assert_eq!(bigrams("单"), " 单 ");
    }

    #[test]
    fn japanese_and_korean_runs_too_and_punctuation_separates() {
        assert_eq!(bigrams("カード・決済"), " カー ード ・ 決済 ");
        assert_eq!(bigrams("결제 실패"), " 결제   실패 ");
        assert_eq!(bigrams("ひらがな"), " ひら らが がな ");
    }

    #[test]
    fn text_without_cjk_is_left_alone() {
        assert!(matches!(bigrams("Zürich INV-1"), Cow::Borrowed(_)));
        assert!(matches!(bigrams("INV-1 pending"), Cow::Borrowed(_)));
        assert!(!is_cjk('。') && !is_cjk('、') && !is_cjk('a'));
    }

    #[test]
    fn a_lone_letter_is_one_cjk_letter_and_nothing_else() {
        assert!(is_lone_letter("死") && is_lone_letter("(死)"));
        assert!(!is_lone_letter("死信") && !is_lone_letter("a死") && !is_lone_letter("x"));
    }
}
