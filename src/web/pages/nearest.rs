//! What a list that finds nothing says: how its search was read (the words, phrases and
//! prefixes looked for in the text, what each field was matched with), and the nearest
//! searches that would find something — business field values sharing the start of the
//! one typed (through their keys), DLQ names whatever their case, field names a letter or
//! two away from a `name:` that was read as text.

use crate::archive::selection::query_value;
use crate::archive::MessageFilter;
use crate::message::search::{FieldTerm, Search, BUILT_IN_FIELDS};

use crate::web::AppState;

/// A searched thing said in words, or an offer of another search.
pub struct Hint {
    pub text: String,
    /// Searches to try instead: (label, the list's link).
    pub links: Vec<(String, String)>,
}

/// Values offered per field at most.
const OFFERED: u32 = 5;
/// Characters a value's start keeps at least when it is shortened to find neighbours.
const MIN_START: usize = 2;

/// How a parsed search was read, one line per kind of piece.
pub fn read_as(search: &Search) -> Vec<String> {
    let quoted = |s: &String| format!("\u{201c}{s}\u{201d}");
    let mut out = Vec::new();
    let mut text: Vec<String> = search.words.iter().map(quoted).collect();
    text.extend(
        search
            .phrases
            .iter()
            .map(|p| format!("{} (in this order)", quoted(p))),
    );
    text.extend(
        search
            .prefixes
            .iter()
            .map(|p| format!("a word starting {}", quoted(p))),
    );
    if !text.is_empty() {
        out.push(format!(
            "Looked for in the body, ids and headers (case and accents aside): {}.",
            text.join(", ")
        ));
    }
    for t in &search.fields {
        out.push(term_read_as(t));
    }
    out
}

fn term_read_as(t: &FieldTerm) -> String {
    let value = format!("\u{201c}{}\u{201d}", t.value);
    match (t.is_business(), t.prefix, t.field.as_str()) {
        (true, true, name) => format!("{name}: a value with a word starting {value}."),
        (true, false, name) => format!(
            "{name}: a value holding the words {value}, in this order (case and accents aside)."
        ),
        (false, _, name @ ("status" | "reason")) => format!("{name}: {value}."),
        (false, _, name) => format!(
            "{name}: exactly {value} (names and ids are compared as RabbitMQ compares them)."
        ),
    }
}

/// The offers for a search `q` that found nothing.
pub async fn offers(
    state: &AppState,
    q: &str,
    filter: &MessageFilter,
    queues: &[String],
) -> Vec<Hint> {
    let Ok(search) = crate::message::search::parse(q, &state.business_fields) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    // Values are offered from the whole archive's field index: not to a caller whose rights
    // are of some DLQs only (the list's filter then names them).
    let whole_archive = filter.dlqs.is_none();
    for term in search
        .fields
        .iter()
        .filter(|t| t.is_business() && whole_archive)
    {
        if let Some(hint) = business_offer(state, &search, term).await {
            out.push(hint);
        }
    }
    let queue_values = filter.queue.iter().map(String::as_str).chain(
        search
            .fields
            .iter()
            .filter(|t| t.field == "queue")
            .map(|t| t.value.as_str()),
    );
    for value in queue_values {
        if let Some(hint) = queue_offer(value, queues, q, filter) {
            out.push(hint);
        }
    }
    out.extend(field_name_offers(&search, &state.business_fields, q));
    out
}

/// For a business field term that finds no value of its own: the values that share the
/// longest start with it.
async fn business_offer(state: &AppState, search: &Search, term: &FieldTerm) -> Option<Hint> {
    let (low, high) = crate::message::field_match::term_range(&term.value, term.prefix)?;
    let archive = &state.archive;
    let alone = archive
        .field_values_in(&term.field, &low, &high, 1)
        .await
        .ok()?;
    if !alone.is_empty() {
        // The term finds values: the other filters are what leave nothing.
        return None;
    }
    let bounds: Vec<usize> = low
        .char_indices()
        .map(|(i, _)| i)
        .filter(|i| *i >= MIN_START)
        .collect();
    for end in bounds.into_iter().rev() {
        let start = &low[..end];
        let values = archive
            .field_values_in(&term.field, start, &format!("{start}\u{10FFFF}"), OFFERED)
            .await
            .ok()?;
        if values.is_empty() {
            continue;
        }
        let links = values
            .into_iter()
            .map(|v| {
                let mut other = search.clone();
                for t in other.fields.iter_mut().filter(|t| **t == *term) {
                    t.value = v.clone();
                    t.prefix = false;
                }
                (
                    format!("{}:{}", term.field, quoted_if_needed(&v)),
                    list_link(&other.to_string()),
                )
            })
            .collect();
        return Some(Hint {
            text: format!(
                "No {} value holds \u{201c}{}\u{201d}. Nearest:",
                term.field, term.value
            ),
            links,
        });
    }
    Some(Hint {
        text: format!(
            "No {} value holds \u{201c}{}\u{201d}, nor anything starting like it.",
            term.field, term.value
        ),
        links: Vec::new(),
    })
}

/// A DLQ that is not archived under that name, but is under another case or inside it.
fn queue_offer(value: &str, queues: &[String], q: &str, filter: &MessageFilter) -> Option<Hint> {
    if queues.iter().any(|name| name == value) {
        return None;
    }
    let folded = value.to_lowercase();
    let near: Vec<&String> = queues
        .iter()
        .filter(|name| {
            let name = name.to_lowercase();
            name == folded || name.contains(&folded) || folded.contains(&name)
        })
        .take(OFFERED as usize)
        .collect();
    let text =
        format!("No DLQ is archived as \u{201c}{value}\u{201d} (DLQ names are compared exactly).");
    let links = near
        .into_iter()
        .map(|name| {
            let link = match filter.queue.as_deref() == Some(value) {
                true => format!("/messages?queue={}", query_value(name)),
                false => list_link(&q.replace(&format!("queue:{value}"), &format!("queue:{name}"))),
            };
            (name.clone(), link)
        })
        .collect::<Vec<_>>();
    Some(Hint {
        text: match links.is_empty() {
            true => text,
            false => format!("{text} Nearest:"),
        },
        links,
    })
}

/// Words typed as `name:value` whose name is no field (so they were read as text), with the
/// field names they may have meant.
fn field_name_offers(search: &Search, business: &[String], q: &str) -> Vec<Hint> {
    let names: Vec<&str> = BUILT_IN_FIELDS
        .iter()
        .copied()
        .chain(business.iter().map(String::as_str))
        .collect();
    let mut out = Vec::new();
    for word in &search.words {
        let Some((name, value)) = word.split_once(':') else {
            continue;
        };
        if name.len() < 2
            || value.is_empty()
            || !name.chars().all(|c| c.is_alphanumeric() || c == '_')
        {
            continue;
        }
        let name = name.to_lowercase();
        let meant: Vec<&str> = names
            .iter()
            .copied()
            .filter(|f| f.starts_with(&name) || name.starts_with(f) || edits(f, &name) <= 2)
            .take(3)
            .collect();
        if meant.is_empty() {
            continue;
        }
        out.push(Hint {
            text: format!(
                "\u{201c}{name}\u{201d} is no field, so \u{201c}{word}\u{201d} was looked for as text. Did you mean"
            ),
            links: meant
                .into_iter()
                .map(|f| {
                    let fixed = format!("{f}:{value}");
                    (fixed.clone(), list_link(&q.replace(word.as_str(), &fixed)))
                })
                .collect(),
        });
    }
    out
}

/// The edit distance of two short names (Levenshtein).
fn edits(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let here = row[j + 1];
            row[j + 1] = (prev + usize::from(ca != *cb))
                .min(row[j] + 1)
                .min(here + 1);
            prev = here;
        }
    }
    row[b.len()]
}

fn quoted_if_needed(v: &str) -> String {
    match v.contains(|c: char| c.is_whitespace() || c == '"') || v.is_empty() {
        true => format!("\"{}\"", v.replace('"', "\\\"")),
        false => v.to_owned(),
    }
}

fn list_link(q: &str) -> String {
    format!("/messages?q={}", query_value(q))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_search_is_said_as_it_was_read() {
        let search = crate::message::search::parse(
            r#"timeout "tax service" inv* customer:"Acme Corp" invoice:INV-20* queue:a.dlq"#,
            &["customer".into(), "invoice".into()],
        )
        .unwrap();
        let read = read_as(&search);
        assert_eq!(read.len(), 4, "{read:?}");
        assert!(read[0].contains("\u{201c}timeout\u{201d}, \u{201c}tax service\u{201d} (in this order), a word starting \u{201c}inv\u{201d}"), "{read:?}");
        assert!(
            read[1].starts_with("customer: a value holding the words \u{201c}Acme Corp\u{201d}")
        );
        assert!(read[2].starts_with("invoice: a value with a word starting \u{201c}INV-20\u{201d}"));
        assert!(read[3].starts_with("queue: exactly \u{201c}a.dlq\u{201d}"));
    }

    #[test]
    fn a_name_read_as_text_is_offered_the_fields_it_may_mean() {
        let business = vec!["customer".to_owned()];
        let q = "cust:acme timeout";
        let search = crate::message::search::parse(q, &business).unwrap();
        let offers = field_name_offers(&search, &business, q);
        assert_eq!(offers.len(), 1);
        assert_eq!(offers[0].links[0].0, "customer:acme");
        assert_eq!(offers[0].links[0].1, "/messages?q=customer%3Aacme+timeout");
        let none = crate::message::search::parse("09:30 http://x", &business).unwrap();
        assert!(field_name_offers(&none, &business, "09:30 http://x").is_empty());
        assert_eq!(edits("queue", "qeue"), 1);
        assert_eq!(edits("reason", "raeson"), 2);
    }

    #[test]
    fn a_dlq_named_in_another_case_is_offered() {
        let queues = vec!["Billing.DLQ".to_owned(), "orders.dlq".to_owned()];
        let filter = MessageFilter {
            queue: Some("billing.dlq".into()),
            ..Default::default()
        };
        let hint = queue_offer("billing.dlq", &queues, "", &filter).unwrap();
        assert_eq!(
            hint.links,
            [(
                "Billing.DLQ".to_owned(),
                "/messages?queue=Billing.DLQ".to_owned()
            )]
        );
        assert!(queue_offer("orders.dlq", &queues, "", &filter).is_none());
    }
}
