//! Masking for viewers: the JSON pointers given with `--mask` (card numbers, emails) are
//! shown as `***` to callers with the viewer role — in bodies (page, API, download), in the
//! business fields extracted from them and in the searches a plan was made from — and
//! viewers cannot search by those fields. A body that cannot be masked (not JSON, or over
//! [`MAX_MASKED_BODY`] decoded) is withheld from them. Operators and admins see messages as
//! archived. (Masked values are kept out of the word index at ingest.)

use std::collections::BTreeMap;

use crate::archive::{BodyStart, BusinessField, MessageFilter, Role, StoredBody};
use crate::message::body::{whole_text, NotText};
pub use crate::message::masking::MAX_MASKED_BODY;
use crate::message::masking::{mask_json, Pointers, MASK};
use crate::message::structured::protobuf::Schemas;
use crate::web::AppError;

/// The masking rules of an instance.
#[derive(Debug, Clone, Default)]
pub struct Masking {
    pointers: Pointers,
    /// Business fields whose pointer is masked (or lies inside a masked value).
    fields: Vec<String>,
}

fn withheld(why: &str) -> StoredBody {
    StoredBody {
        bytes: format!("(withheld: {why})").into_bytes(),
        content_type: Some("text/plain".into()),
        content_encoding: None,
        headers: None,
        message_type: None,
    }
}

impl Masking {
    pub fn new(pointers: &[String], fields: &[BusinessField]) -> Self {
        let pointers = Pointers::new(pointers);
        Masking {
            fields: fields
                .iter()
                .filter(|f| pointers.cover(&f.pointer))
                .map(|f| f.name.clone())
                .collect(),
            pointers,
        }
    }

    /// Whether a caller with `role` sees masked bodies.
    pub fn applies(&self, role: Role) -> bool {
        role == Role::Viewer && !self.pointers.is_empty()
    }

    /// The body a caller with `role` may see: for viewers, the JSON decoded (so without
    /// its content-encoding, in UTF-8) and masked, or a note that it is withheld; as archived
    /// otherwise. At most [`MAX_MASKED_BODY`] bytes are ever decoded, in one pass without
    /// recursion: run it off the async threads (it is CPU work on up to 8 MiB).
    pub fn body(&self, role: Role, body: StoredBody, schemas: Option<&Schemas>) -> StoredBody {
        if !self.applies(role) {
            return body;
        }
        let encoding = body.encoding().with_schemas(schemas);
        let text = whole_text(&body.bytes, &encoding, MAX_MASKED_BODY);
        let text = match text {
            Ok(text) => text,
            Err(NotText::TooLarge) => {
                return withheld(&format!(
                    "masking is configured and this body decodes to more than {} MiB, too large to mask",
                    MAX_MASKED_BODY / (1024 * 1024)
                ))
            }
            Err(NotText::Undecodable) => {
                return withheld("masking is configured and this body is not text that decodes")
            }
        };
        match mask_json(&text, &self.pointers) {
            Some(masked) => StoredBody {
                bytes: masked.into_bytes(),
                content_type: Some("application/json".into()),
                content_encoding: None,
                headers: None,
                message_type: None,
            },
            // What is not JSON cannot be masked, so viewers do not see it.
            None => withheld("masking is configured and this body is not JSON"),
        }
    }

    /// [`Masking::body`] for the start of a body: one not read whole (it has more than
    /// [`MAX_MASKED_BODY`] bytes) cannot be masked, so viewers do not see it.
    pub fn start(&self, role: Role, start: BodyStart, schemas: Option<&Schemas>) -> BodyStart {
        if !self.applies(role) {
            return start;
        }
        let body = match start.is_whole() {
            true => self.body(role, start.body, schemas),
            false => withheld(&format!(
                "masking is configured and this body is more than {} MiB, too large to mask",
                MAX_MASKED_BODY / (1024 * 1024)
            )),
        };
        BodyStart {
            size: body.bytes.len() as u64,
            body,
        }
    }

    /// Refuses a viewer's search on a masked business field (it would reveal the value).
    pub fn check_search(&self, role: Role, filter: &MessageFilter) -> Result<(), AppError> {
        if !self.applies(role) {
            return Ok(());
        }
        match filter.terms.iter().find(|t| self.fields.contains(&t.field)) {
            Some(t) => Err(AppError::Forbidden(format!(
                "{} is masked for viewers: it cannot be searched by",
                t.field
            ))),
            None => Ok(()),
        }
    }

    /// Masks the business fields a caller with `role` may not read.
    /// A message's summary as a caller with `role` may see it: business fields masked, and no
    /// body snippet (it was cut from the body before any mask added since).
    pub fn summary(&self, role: Role, summary: &mut crate::archive::MessageSummary) {
        if self.applies(role) {
            summary.snippet = None;
        }
        self.fields(role, &mut summary.fields);
    }

    pub fn fields(&self, role: Role, fields: &mut BTreeMap<String, String>) {
        if !self.applies(role) {
            return;
        }
        for name in &self.fields {
            if let Some(v) = fields.get_mut(name) {
                *v = MASK.into();
            }
        }
    }

    /// A job's selection as a caller with `role` may see it: a search by a masked business
    /// field (`card:4111…`) shows `card:***` to viewers, and so do its free words and
    /// phrases (a card number searched as a word is a masked value as much).
    pub fn selection(
        &self,
        role: Role,
        selection: &serde_json::Value,
        business_fields: &[String],
    ) -> serde_json::Value {
        let mut selection = selection.clone();
        if !self.applies(role) {
            return selection;
        }
        let Some(q) = selection.pointer_mut("/filter/q") else {
            return selection;
        };
        let masked = match q
            .as_str()
            .map(|q| crate::message::search::parse(q, business_fields))
        {
            Some(Ok(mut search)) => {
                for term in &mut search.fields {
                    if self.fields.contains(&term.field) {
                        term.value = MASK.into();
                    }
                }
                let had_text = !(search.words.is_empty()
                    && search.prefixes.is_empty()
                    && search.phrases.is_empty());
                search.prefixes.clear();
                search.phrases.clear();
                search.words = if had_text { vec![MASK.into()] } else { vec![] };
                search.to_string()
            }
            // Not a search this instance reads: nothing of it can be shown safely.
            _ => MASK.to_owned(),
        };
        *q = serde_json::Value::String(masked);
        selection
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn stored(bytes: &[u8], content_type: Option<&str>, encoding: Option<&str>) -> StoredBody {
        StoredBody {
            bytes: bytes.to_vec(),
            content_type: content_type.map(str::to_owned),
            content_encoding: encoding.map(str::to_owned),
            headers: None,
            message_type: None,
        }
    }

    fn shown(m: &Masking, body: StoredBody) -> String {
        String::from_utf8(m.body(Role::Viewer, body, None).bytes).unwrap()
    }

    #[test]
    fn messagepack_bodies_are_masked_as_the_json_they_stand_for() {
        let m = Masking::new(&["/card".into()], &[]);
        // {"card": "4111", "n": 1} in MessagePack.
        let body = b"\x82\xa4card\xa44111\xa1n\x01";
        let seen = shown(
            &m,
            stored(body, Some("application/x-msgpack"), Some("binary")),
        );
        assert_eq!(seen, r#"{"card":"***","n":1}"#);
    }

    #[test]
    fn viewers_get_masked_json_or_nothing() {
        let m = Masking::new(&["/card/number".into()], &[]);
        let json = br#"{"card": {"number": "4111", "exp": "12/29"}}"#;
        let seen = shown(&m, stored(json, Some("application/json"), None));
        assert_eq!(seen, r#"{"card": {"number": "***", "exp": "12/29"}}"#);
        for hidden in [
            stored(b"card 4111", Some("text/plain"), None),
            stored(b"\x1f\x8b not gzip", None, Some("gzip")),
            stored(b"{\"card\": {\"number\": \"\xff\"}}", None, None),
        ] {
            let seen = shown(&m, hidden);
            assert!(
                seen.starts_with("(withheld") && !seen.contains("4111"),
                "{seen}"
            );
        }
        let latin1 = stored(
            b"{\"card\": {\"number\": \"4111\"}, \"who\": \"Ren\xe9\"}",
            Some("application/json; charset=iso-8859-1"),
            None,
        );
        assert_eq!(
            shown(&m, latin1),
            r#"{"card": {"number": "***"}, "who": "René"}"#
        );
    }

    #[test]
    fn a_bomb_is_decoded_no_further_than_the_limit() {
        use std::io::Write;
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        gz.write_all(br#"{"card": {"number": "4111"}, "pad": ""#)
            .unwrap();
        for _ in 0..(MAX_MASKED_BODY / 4096 + 1) {
            gz.write_all(&[b'a'; 4096]).unwrap();
        }
        gz.write_all(br#""}"#).unwrap();
        let bomb = stored(
            &gz.finish().unwrap(),
            Some("application/json"),
            Some("gzip"),
        );
        let m = Masking::new(&["/card/number".into()], &[]);
        let seen = shown(&m, bomb);
        assert!(seen.contains("too large to mask"), "{seen}");
    }

    #[test]
    fn the_start_of_a_large_body_is_withheld_not_masked() {
        let m = Masking::new(&["/card".into()], &[]);
        let json = br#"{"card": "4111", "pad": "#;
        let start = BodyStart {
            body: stored(json, Some("application/json"), None),
            size: 100 << 20,
        };
        let seen = m.start(Role::Viewer, start.clone(), None);
        let text = String::from_utf8(seen.body.bytes.clone()).unwrap();
        assert!(text.contains("too large to mask"), "{text}");
        assert!(seen.is_whole(), "the note is all a viewer gets");
        assert_eq!(m.start(Role::Operator, start.clone(), None), start);
        let whole = BodyStart {
            body: stored(br#"{"card": "4111"}"#, None, None),
            size: 16,
        };
        let seen = m.start(Role::Viewer, whole, None);
        assert_eq!(seen.body.bytes, br#"{"card": "***"}"#);
        assert_eq!(seen.size, 15);
    }

    #[test]
    fn only_viewers_are_masked() {
        let fields: Vec<BusinessField> = ["card=/card/number", "order=/order"]
            .iter()
            .map(|f| f.parse().unwrap())
            .collect();
        let m = Masking::new(&["/card".into()], &fields);
        let body = stored(
            br#"{"card": {"number": "4111"}, "order": "O-1"}"#,
            Some("application/json"),
            None,
        );
        assert_eq!(m.body(Role::Operator, body.clone(), None), body);
        assert!(!shown(&m, body).contains("4111"));
        let mut values = BTreeMap::from([
            ("card".to_owned(), "4111".to_owned()),
            ("order".to_owned(), "O-1".to_owned()),
        ]);
        m.fields(Role::Admin, &mut values);
        assert_eq!(values["card"], "4111");
        m.fields(Role::Viewer, &mut values);
        assert_eq!(
            (values["card"].as_str(), values["order"].as_str()),
            (MASK, "O-1")
        );
    }

    #[test]
    fn a_plan_made_by_a_masked_field_shows_viewers_the_mask() {
        let fields: Vec<BusinessField> = ["card=/card/number", "order=/order"]
            .iter()
            .map(|f| f.parse().unwrap())
            .collect();
        let names: Vec<String> = fields.iter().map(|f| f.name.clone()).collect();
        let m = Masking::new(&["/card".into()], &fields);
        let selection =
            json!({"filter": {"q": "card:\"4111 2222\" order:O-1 timeout", "queue": "q"}});
        let seen = m.selection(Role::Viewer, &selection, &names);
        let q = seen["filter"]["q"].as_str().unwrap();
        assert!(!q.contains("4111") && q.contains("card:***"), "{q}");
        assert!(q.contains("order:O-1") && !q.contains("timeout"), "{q}");
        let words = json!({"filter": {"q": "4111222233334444 \"card 4111\" 41112*"}});
        let seen_words = m.selection(Role::Viewer, &words, &names);
        assert_eq!(seen_words["filter"]["q"], "***");
        assert_eq!(seen["filter"]["queue"], "q");
        assert_eq!(m.selection(Role::Operator, &selection, &names), selection);
        let ids = json!({"ids": ["1"]});
        assert_eq!(m.selection(Role::Viewer, &ids, &names), ids);
    }
}
