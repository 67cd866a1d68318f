//! A selection as people read it: the list's filters in use as chips (`queue: billing.dlq`,
//! `search: timeout`), on the list (each a link that drops it) and wherever a selection is
//! shown again — a plan, a job, an audit entry — from the JSON it was stored as, instead of
//! that JSON.

use serde_json::Value;

use crate::archive::selection::{query_value, ListParams};
use crate::archive::NO_REASON;

/// A filter in use, and the link it leads to: on the list, the same list without it; on a
/// plan, job or audit entry, the list of what it selected.
pub struct Chip {
    pub label: String,
    pub link: String,
}

/// The label of a filter and its value, as the list's form names it.
pub fn label(name: &str, value: &str) -> String {
    let name = match name {
        "q" => "search",
        "first_death_queue" => "first died in",
        "routing_key" => "routing key",
        "content_type" => "content type",
        "job" => "published by replay job",
        "copies_of_job" => "died again after replay job",
        other => other,
    };
    match (name, value) {
        ("reason", NO_REASON) => "reason: none (no death history)".to_owned(),
        _ => format!("{name}: {value}"),
    }
}

/// The filters of the list as name/value pairs (empty ones left out), in the form's order.
pub fn filter_pairs(form: &ListParams) -> Vec<(String, String)> {
    form_urlencoded::parse(form.to_query(None).as_bytes())
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect()
}

/// The list's chips: each filter in use, with the link to the same list without it; a
/// failure group's (`group=<id>`) says what the group is (`group`: its cause and where,
/// when it is known).
pub fn removable(pairs: &[(String, String)], group: Option<&str>) -> Vec<Chip> {
    pairs
        .iter()
        .enumerate()
        .map(|(i, (name, value))| {
            let rest: String = form_urlencoded::Serializer::new(String::new())
                .extend_pairs(
                    pairs
                        .iter()
                        .enumerate()
                        .filter(|(j, _)| *j != i)
                        .map(|(_, pair)| pair),
                )
                .finish();
            let value = match (name.as_str(), group) {
                ("group", Some(group)) => group,
                _ => value.as_str(),
            };
            Chip {
                label: label(name, value),
                link: match rest.is_empty() {
                    true => "/messages".into(),
                    false => format!("/messages?{rest}"),
                },
            }
        })
        .collect()
}

/// A stored selection (`{"filter": {...}}` or `{"ids": [...]}`, as a plan keeps it and the
/// audit log writes it) as chips, each leading to the list of what it selects (a message
/// picked by hand: its page). `None` when the JSON is no selection.
pub fn of_selection(selection: &Value) -> Option<Vec<Chip>> {
    if let Some(filter) = selection.get("filter") {
        let form: ListParams = serde_json::from_value(filter.clone()).ok()?;
        let pairs = filter_pairs(&form);
        if pairs.is_empty() {
            return Some(vec![Chip {
                label: "every archived message".into(),
                link: "/messages".into(),
            }]);
        }
        let whole = format!("/messages?{}", form.to_query(None));
        return Some(
            pairs
                .iter()
                .map(|(name, value)| Chip {
                    label: label(name, value),
                    link: whole.clone(),
                })
                .collect(),
        );
    }
    match selection.get("ids")? {
        Value::Array(ids) => Some(
            ids.iter()
                .filter_map(|id| match id {
                    Value::String(s) => Some(s.clone()),
                    Value::Number(n) => Some(n.to_string()),
                    _ => None,
                })
                .map(|id| Chip {
                    label: format!("message {id}"),
                    link: format!("/messages/{}", query_value(&id)),
                })
                .collect(),
        ),
        Value::Number(n) => Some(vec![Chip {
            label: format!(
                "{} messages picked by hand",
                crate::web::html::thousands(n.as_i64()?)
            ),
            link: "/messages".into(),
        }]),
        _ => None,
    }
}

/// A piece of a text that may hold stored selections: plain text, or a selection as chips.
pub enum Piece {
    Text(String),
    Chips(Vec<Chip>),
}

/// `text` with each selection JSON in it (`{"filter": ...}`, `{"ids": ...}`, as audit entries
/// hold them) shown as chips; what does not read as one stays text.
pub fn in_text(text: &str) -> Vec<Piece> {
    let mut out = Vec::new();
    let mut rest = text;
    loop {
        let start = ["{\"filter\":", "{\"ids\":"]
            .iter()
            .filter_map(|marker| rest.find(marker))
            .min();
        let Some(start) = start else { break };
        let mut values = serde_json::Deserializer::from_str(&rest[start..]).into_iter::<Value>();
        let parsed = values
            .next()
            .and_then(Result::ok)
            .and_then(|v| of_selection(&v));
        let end = start + values.byte_offset();
        match parsed {
            Some(chips) => {
                if start > 0 {
                    out.push(Piece::Text(rest[..start].to_owned()));
                }
                out.push(Piece::Chips(chips));
                rest = &rest[end..];
            }
            None => {
                // Not a selection after all: keep it as text and look further on.
                let next = start + 1;
                out.push(Piece::Text(rest[..next].to_owned()));
                rest = &rest[next..];
            }
        }
    }
    if !rest.is_empty() {
        out.push(Piece::Text(rest.to_owned()));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn labels(chips: &[Chip]) -> Vec<&str> {
        chips.iter().map(|c| c.label.as_str()).collect()
    }

    #[test]
    fn each_filter_in_use_is_a_chip_whose_link_drops_it() {
        let form = ListParams {
            q: Some("invoice 42".into()),
            error: Some("TimeoutException: tax".into()),
            queue: Some(" ".into()),
            ..Default::default()
        };
        let found = removable(&filter_pairs(&form), None);
        let shown: Vec<(&str, &str)> = found
            .iter()
            .map(|c| (c.label.as_str(), c.link.as_str()))
            .collect();
        assert_eq!(
            shown,
            [
                (
                    "search: invoice 42",
                    "/messages?error=TimeoutException%3A+tax"
                ),
                ("error: TimeoutException: tax", "/messages?q=invoice+42"),
            ]
        );
        assert!(removable(&[], None).is_empty());
    }

    #[test]
    fn a_stored_selection_reads_as_the_lists_chips() {
        let chips = of_selection(&json!({"filter": {"queue": "billing.dlq", "reason": "none", "q": "\"VAT id missing\""}})).unwrap();
        assert_eq!(
            labels(&chips),
            [
                "search: \"VAT id missing\"",
                "queue: billing.dlq",
                "reason: none (no death history)"
            ]
        );
        assert!(chips[0].link.starts_with("/messages?q=%22VAT"));
        let ids = of_selection(&json!({"ids": ["4", "9"]})).unwrap();
        assert_eq!(labels(&ids), ["message 4", "message 9"]);
        assert_eq!(ids[1].link, "/messages/9");
        let many = of_selection(&json!({"ids": 12000})).unwrap();
        assert_eq!(labels(&many), ["12,000 messages picked by hand"]);
        assert!(of_selection(&json!({"nothing": 1})).is_none());
    }

    #[test]
    fn selections_inside_a_text_become_chips() {
        let pieces = in_text(
            r#"planned replay job 3: 5 of 5 selected messages; selection {"filter":{"queue":"a.dlq"}}; at most 10/s"#,
        );
        let shown: Vec<String> = pieces
            .iter()
            .map(|p| match p {
                Piece::Text(t) => t.clone(),
                Piece::Chips(c) => format!("[{}]", labels(c).join("|")),
            })
            .collect();
        assert_eq!(
            shown,
            [
                "planned replay job 3: 5 of 5 selected messages; selection ",
                "[queue: a.dlq]",
                "; at most 10/s"
            ]
        );
        let broken = in_text(r#"odd {"filter": nope} end"#);
        let text: String = broken
            .iter()
            .map(|p| match p {
                Piece::Text(t) => t.as_str(),
                Piece::Chips(_) => "CHIPS",
            })
            .collect();
        assert_eq!(text, r#"odd {"filter": nope} end"#);
    }
}
