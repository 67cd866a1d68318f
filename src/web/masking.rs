//! Masking for viewers: the JSON pointers given with `--mask` (card numbers, emails) are
//! shown as `***` to callers with the viewer role — in bodies (page, API, download) and in
//! the business fields extracted from them — and viewers cannot search by those fields.
//! Operators and admins see messages as archived. (Masked values are kept out of the
//! full-text index at ingest.)

use std::collections::BTreeMap;

use super::AppError;
use crate::archive::{BusinessField, MessageFilter, Role, StoredBody};
use crate::body::{mask_json, MASK};

/// Bodies are decoded up to this size to be masked; a larger one is withheld from viewers.
const MAX_MASKED_BODY: usize = 64 * 1024 * 1024;

/// The masking rules of an instance.
#[derive(Debug, Clone, Default)]
pub struct Masking {
    pointers: Vec<String>,
    /// Business fields whose pointer is masked (or lies inside a masked value).
    fields: Vec<String>,
}

impl Masking {
    pub fn new(pointers: &[String], fields: &[BusinessField]) -> Self {
        let masked_field = |f: &&BusinessField| {
            pointers
                .iter()
                .any(|p| f.pointer == *p || f.pointer.starts_with(&format!("{p}/")))
        };
        Masking {
            pointers: pointers.to_vec(),
            fields: fields
                .iter()
                .filter(masked_field)
                .map(|f| f.name.clone())
                .collect(),
        }
    }

    fn applies(&self, role: Role) -> bool {
        role == Role::Viewer && !self.pointers.is_empty()
    }

    /// The body a caller with `role` may see: masked JSON (decoded, so without its
    /// content-encoding) for viewers, as archived otherwise. A body that is not JSON cannot
    /// be masked and is shown as archived.
    pub fn body(&self, role: Role, body: StoredBody) -> StoredBody {
        if !self.applies(role) {
            return body;
        }
        let decoded = crate::body::decompress(
            &body.bytes,
            body.content_encoding.as_deref(),
            MAX_MASKED_BODY,
        );
        let decoded = match decoded {
            Ok(None) => body.bytes.clone(),
            Ok(Some(d)) if d.complete => d.bytes,
            _ => {
                return StoredBody {
                    bytes: b"(withheld: too large or undecodable to mask)".to_vec(),
                    content_type: Some("text/plain".into()),
                    content_encoding: None,
                }
            }
        };
        match mask_json(&decoded, &self.pointers) {
            Some(masked) => StoredBody {
                bytes: masked,
                content_type: body.content_type,
                content_encoding: None,
            },
            // What is not JSON cannot be masked, so viewers do not see it.
            None => StoredBody {
                bytes: b"(withheld: masking is configured and this body is not JSON)".to_vec(),
                content_type: Some("text/plain".into()),
                content_encoding: None,
            },
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
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pointers_are_masked_and_the_rest_kept() {
        let body = br#"{"card": {"number": "4111111111111111", "exp": "12/29"}, "email": "a@b.c", "n": 1}"#;
        let masked = mask_json(
            body,
            &["/card/number".into(), "/email".into(), "/absent".into()],
        )
        .unwrap();
        let v: serde_json::Value = serde_json::from_slice(&masked).unwrap();
        assert_eq!(v["card"]["number"], MASK);
        assert_eq!(v["card"]["exp"], "12/29");
        assert_eq!(v["email"], MASK);
        assert_eq!(v["n"], 1);
        assert_eq!(mask_json(b"not json", &["/a".into()]), None);
        let m = Masking::new(&["/a".into()], &[]);
        let text = StoredBody {
            bytes: b"card 4111".to_vec(),
            content_type: None,
            content_encoding: None,
        };
        assert!(!String::from_utf8(m.body(Role::Viewer, text).bytes)
            .unwrap()
            .contains("4111"));
    }

    #[test]
    fn only_viewers_are_masked() {
        let fields: Vec<BusinessField> = ["card=/card/number", "order=/order"]
            .iter()
            .map(|f| f.parse().unwrap())
            .collect();
        let m = Masking::new(&["/card".into()], &fields);
        let body = StoredBody {
            bytes: br#"{"card": {"number": "4111"}, "order": "O-1"}"#.to_vec(),
            content_type: Some("application/json".into()),
            content_encoding: None,
        };
        assert_eq!(m.body(Role::Operator, body.clone()), body);
        let seen = m.body(Role::Viewer, body);
        assert!(!String::from_utf8(seen.bytes).unwrap().contains("4111"));
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
}
