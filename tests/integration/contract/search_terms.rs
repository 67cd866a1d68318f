//! SQLite's word list (`search_terms`), which list searches expand `prefix*` with: it holds
//! every word the FTS5 index holds that a prefix can reach, whatever the script, so that an
//! expanded prefix finds exactly what FTS5's own prefix query finds.

use std::collections::BTreeSet;

use sqlx::{Connection, SqliteConnection};

use super::*;

/// Texts where a tokenizer written apart from FTS5's would split words differently:
/// decomposed accents, marks of Indic and Thai scripts, Arabic vowel marks, private use,
/// letters newer than FTS5's Unicode tables, circled letters, emoji, CJK (bigrams).
const HARD: [&str; 14] = [
    "Payment PENDING for INV-2026-00042 (pending since 09:30)",
    "Zürich Kraków Ørsted naïve café",
    "e\u{301}tude cafe\u{301}s x\u{301}yz",
    "हिन्दी परीक्षण संदेश",
    "ทดสอบภาษาไทยข้อความ",
    "مَرْحَبًا بالعالم",
    "\u{E000}private\u{E001}use",
    "Ⓐbc Ⓩyx ⓐⓑⓒ",
    "Ა Ბ ᲐᲑᲒ mtavruli",
    "\u{2B820}\u{2B821} extension",
    "🔥hot🔥 ❤love",
    "测试死信消息 カード決済エラー 결제실패",
    "Привет мир ΚΑΛΗΜΕΡΑ",
    "ǅungla ﬁnance ß straße",
];

/// A deterministic jumble of characters from every script above and ASCII punctuation.
fn jumbles(n: usize) -> Vec<String> {
    let pool: Vec<char> = HARD
        .iter()
        .flat_map(|t| t.chars())
        .chain("-_.:/'\"\\ \t\n#@".chars())
        .collect();
    let mut state: u64 = 0x2545_f491_4f6c_dd1d;
    (0..n)
        .map(|_| {
            (0..40)
                .map(|_| {
                    state ^= state << 13;
                    state ^= state >> 7;
                    state ^= state << 17;
                    pool[(state % pool.len() as u64) as usize]
                })
                .collect()
        })
        .collect()
}

async fn rows(conn: &mut SqliteConnection, sql: &str) -> Vec<String> {
    sqlx::query_scalar(sql).fetch_all(conn).await.unwrap()
}

#[tokio::test]
async fn the_word_list_holds_every_word_the_index_holds_and_prefixes_find_the_same() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("a.db").display());
    let archive = lazarus::archive::open(&url).await.unwrap();
    let texts: Vec<String> = HARD
        .iter()
        .map(|t| t.to_string())
        .chain(jumbles(300))
        .collect();
    let messages = texts
        .iter()
        .enumerate()
        .map(|(i, text)| {
            let mut m = delivery("q", &format!("m{i}"), None);
            m.body = text.as_bytes().to_vec();
            m.properties.content_type = Some("text/plain".into());
            m
        })
        .collect();
    store(&*archive, messages).await;

    let mut conn = SqliteConnection::connect(&url).await.unwrap();
    sqlx::query("CREATE VIRTUAL TABLE temp.v USING fts5vocab(main, messages_fts, row)")
        .execute(&mut conn)
        .await
        .unwrap();
    let indexed = rows(&mut conn, "SELECT term FROM temp.v").await;
    let listed: BTreeSet<String> = rows(&mut conn, "SELECT term FROM search_terms")
        .await
        .into_iter()
        .collect();
    let reachable: Vec<&String> = indexed
        .iter()
        .filter(|t| !t.is_ascii() || t.len() >= lazarus::message::search::MIN_PREFIX_CHARS)
        .collect();
    let missing: Vec<&&String> = reachable.iter().filter(|t| !listed.contains(**t)).collect();
    assert!(missing.is_empty(), "not in the word list: {missing:?}");
    assert!(reachable.len() > 500, "the texts make many words");

    // Every prefix of every reachable word of three ASCII letters or digits, or of one CJK
    // letter: the list (which expands it) finds what FTS5's prefix query finds.
    let prefixes: BTreeSet<String> = reachable
        .iter()
        .filter_map(|t| {
            let p: String = t.chars().take(3).collect();
            let cjk = t
                .chars()
                .next()
                .filter(|c| lazarus::message::cjk::is_cjk(*c));
            match (p.bytes().all(|b| b.is_ascii_alphanumeric()), cjk) {
                (true, _) if p.len() == 3 => Some(p),
                (_, Some(c)) => Some(c.to_string()),
                _ => None,
            }
        })
        .collect();
    assert!(prefixes.len() > 20, "{prefixes:?}");
    for prefix in prefixes {
        let raw: BTreeSet<String> = rows(
            &mut conn,
            &format!(
                "SELECT m.message_id FROM messages_fts f JOIN messages m ON m.id = f.rowid \
                 WHERE messages_fts MATCH '\"{prefix}\"*'"
            ),
        )
        .await
        .into_iter()
        .collect();
        let listed: BTreeSet<String> = found(&*archive, &format!("{prefix}*"))
            .await
            .into_iter()
            .collect();
        assert_eq!(listed, raw, "{prefix}*");
    }
}
