//! Search answers the same on both backends, and what a plain tokenizer says it should: a
//! battery of combined queries (words, `prefix*`, "phrases", `field:value`, CJK, accents,
//! case) over the same messages, each through the list and its count, checked against a
//! reference written here from the search language's rules alone (letters and digits make
//! words, folded for case and accents; CJK runs as overlapping bigrams; every term required).

use std::collections::BTreeSet;

use lazarus::archive::selection::ListParams;
use lazarus::archive::Archive;

use super::*;

/// Fragments the messages are made of: every query below meets them in many combinations.
const FRAGMENTS: [&str; 16] = [
    "Payment PENDING for INV-2026-00042",
    "invoice pending since 09:30",
    "payment refund requested",
    "tax service timed out",
    "Northwind ledger closed",
    "northwind: ledger mismatch",
    "Zürich café naïve",
    "zurich cafe naive",
    "发票待处理 pending",
    "测试死信消息",
    "カード決済エラー tax",
    "Straße ÉTUDE Ørsted",
    "refund pending invoice",
    "pending refund payment",
    "ledger of Northwind, tax-2026",
    "测试 发送 pend",
];

/// Queries made of these, alone, in pairs and in some triples.
const ATOMS: [&str; 35] = [
    "pending",
    "PENDING",
    "invoice",
    "Invoice",
    "refund",
    "northwind",
    "ledger",
    "zurich",
    "Zürich",
    "cafe",
    "café",
    "2026",
    "INV-2026-00042",
    "étude",
    "straße",
    "ørsted",
    "死信",
    "待处理",
    "发",
    "pend*",
    "inv*",
    "tax*",
    "north*",
    "zür*",
    "caf*",
    "发*",
    "测*",
    "\"payment refund\"",
    "\"pending invoice\"",
    "\"tax service\"",
    "\"测试死信\"",
    "\"Northwind ledger\"",
    "queue:sp-a.dlq",
    "message_id:m03",
    "status:archived",
];

struct Stored {
    queue: &'static str,
    message_id: String,
    body: String,
}

/// 48 messages: fragments alone, in pairs and in threes, in two queues.
fn corpus() -> Vec<Stored> {
    (0..48)
        .map(|i| {
            let mut parts = vec![FRAGMENTS[i % 16]];
            if i >= 16 {
                parts.push(FRAGMENTS[(i * 7 + 3) % 16]);
            }
            if i >= 32 {
                parts.push(FRAGMENTS[(i * 5 + 1) % 16]);
            }
            Stored {
                queue: if i % 3 == 0 { "sp-a.dlq" } else { "sp-b.dlq" },
                message_id: format!("m{i:02}"),
                body: parts.join(". "),
            }
        })
        .collect()
}

/// A reference tokenizer: letters and digits make words, lowercased with accents removed;
/// a run of CJK letters is its overlapping bigrams (one letter alone stays one).
fn words(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for token in text
        .split(|c: char| !c.is_alphanumeric())
        .filter(|t| !t.is_empty())
    {
        let mut latin = String::new();
        let mut cjk: Vec<char> = Vec::new();
        let flush_cjk = |cjk: &mut Vec<char>, out: &mut Vec<String>| {
            match cjk.len() {
                0 => {}
                1 => out.push(cjk[0].to_string()),
                _ => out.extend(cjk.windows(2).map(|w| w.iter().collect::<String>())),
            }
            cjk.clear();
        };
        for c in token.chars() {
            if lazarus::message::cjk::is_cjk(c) {
                if !latin.is_empty() {
                    out.push(lazarus::message::search::fold(&std::mem::take(&mut latin)));
                }
                cjk.push(c);
            } else {
                flush_cjk(&mut cjk, &mut out);
                latin.push(c);
            }
        }
        flush_cjk(&mut cjk, &mut out);
        if !latin.is_empty() {
            out.push(lazarus::message::search::fold(&latin));
        }
    }
    out
}

/// Whether `needle` occurs in `hay` as consecutive words, the last one only as a start when
/// `prefix` (an empty needle finds nothing, as the indexes find nothing for it).
fn occurs(hay: &[String], needle: &[String], prefix: bool) -> bool {
    let Some((last, rest)) = needle.split_last() else {
        return false;
    };
    hay.windows(needle.len()).any(|w| {
        w[..rest.len()] == *rest
            && match prefix {
                true => w[rest.len()].starts_with(last.as_str()),
                false => w[rest.len()] == *last,
            }
    })
}

/// What the search language says `query` finds among the messages.
fn expected(query: &str, messages: &[Stored]) -> BTreeSet<String> {
    let search =
        lazarus::message::search::parse(query, &[]).expect("the battery's queries are valid");
    messages
        .iter()
        .filter(|m| {
            // A phrase never spans the body and the ids: each part is its own text.
            let parts = [words(&m.body), words(&m.message_id)];
            let has = |piece: &str, prefix: bool| {
                let needle = words(piece);
                // One CJK letter typed alone is asked for as the start of a bigram.
                let lone =
                    !prefix && needle.len() == 1 && lazarus::message::cjk::is_lone_letter(piece);
                parts.iter().any(|p| occurs(p, &needle, prefix || lone))
            };
            search.words.iter().all(|w| has(w, false))
                && search.phrases.iter().all(|p| has(p, false))
                && search.prefixes.iter().all(|p| has(p, true))
                && search.fields.iter().all(|f| match f.field.as_str() {
                    "queue" => m.queue == f.value,
                    "message_id" => m.message_id == f.value,
                    "status" => f.value == "archived",
                    other => panic!("the battery has no {other}: terms"),
                })
        })
        .map(|m| m.message_id.clone())
        .collect()
}

/// The queries: every atom, every ordered pair of distinct atoms, and a triple per atom.
fn battery() -> Vec<String> {
    let mut out: Vec<String> = ATOMS.iter().map(|a| a.to_string()).collect();
    for a in ATOMS {
        for b in ATOMS {
            if a != b {
                out.push(format!("{a} {b}"));
            }
        }
    }
    for (i, a) in ATOMS.iter().enumerate() {
        let b = ATOMS[(i * 7 + 3) % ATOMS.len()];
        let c = ATOMS[(i * 11 + 5) % ATOMS.len()];
        out.push(format!("{a} {b} {c}"));
    }
    out
}

async fn answers(archive: &dyn Archive, query: &str) -> Result<(Vec<String>, u64), String> {
    let params = ListParams {
        q: Some(query.into()),
        ..Default::default()
    };
    let (filter, _) = params.parse(&[], "/").map_err(|e| e.0)?;
    let found = archive
        .list_messages(
            &filter,
            PageRequest {
                limit: 500,
                before: None,
            },
        )
        .await
        .map_err(|e| format!("list: {e}"))?;
    let counted = archive
        .count_messages(&filter, 10_001)
        .await
        .map_err(|e| format!("count: {e}"))?;
    let mut ids: Vec<String> = found
        .messages
        .into_iter()
        .filter_map(|m| m.message_id)
        .collect();
    ids.sort();
    Ok((ids, counted))
}

async fn combined_queries_find_what_a_plain_tokenizer_finds() {
    let (_dir, archive) = archive().await;
    let messages = corpus();
    let batch = messages
        .iter()
        .map(|m| {
            let mut d = delivery(m.queue, &m.message_id, None);
            d.properties.content_type = Some("text/plain; charset=utf-8".into());
            d.body = m.body.as_bytes().to_vec();
            d
        })
        .collect();
    assert_eq!(store(&*archive, batch).await, (48, 0));

    let queries = battery();
    let (mut empty, mut some, mut wrong) = (0, 0, Vec::new());
    for query in &queries {
        let want: Vec<String> = expected(query, &messages).into_iter().collect();
        match want.len() {
            0 => empty += 1,
            _ => some += 1,
        }
        match answers(&*archive, query).await {
            Ok((found, counted)) if found == want && counted == want.len() as u64 => {}
            Ok((found, counted)) => wrong.push(format!(
                "{query:?}: found {found:?} (count {counted}), expected {want:?}"
            )),
            Err(e) => wrong.push(format!("{query:?}: {e}")),
        }
    }
    // The battery means something: many queries find messages, and many find none.
    assert!(queries.len() > 1_000, "{} queries", queries.len());
    assert!(
        some > 300 && empty > 100,
        "{some} find messages, {empty} none"
    );
    assert!(
        wrong.is_empty(),
        "{} of {} queries answered wrong, e.g.:\n{}",
        wrong.len(),
        queries.len(),
        wrong
            .iter()
            .take(25)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );
}
on_both_backends!(combined_queries_find_what_a_plain_tokenizer_finds);

#[test]
fn the_reference_tokenizer_reads_as_the_language_says() {
    assert_eq!(
        words("Zürich: INV-2026, 测试死信 发 ÉTUDE"),
        ["zurich", "inv", "2026", "测试", "试死", "死信", "发", "etude"]
    );
    let hay = words("payment refund requested");
    assert!(occurs(&hay, &words("payment refund"), false));
    assert!(occurs(&hay, &words("refund req"), true));
    assert!(!occurs(&hay, &words("refund payment"), false));
    assert!(!occurs(&hay, &[], false));
}
