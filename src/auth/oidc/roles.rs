//! `--oidc-role`: the role a group of the identity provider gives, everywhere or on the DLQs a
//! pattern names, and the grants of a user in several groups at once (pure).

use crate::archive::{Grant, Grants, Role};

/// Every DLQ of every vhost, as a pattern.
pub const EVERY_DLQ: &str = "*/*";

/// `GROUP=ROLE` or `GROUP=ROLE:PATTERN`: members of GROUP hold ROLE (on the DLQs PATTERN names).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RoleMapping {
    pub group: String,
    pub role: Role,
    /// `None`: every DLQ, and the whole archive.
    pub on: Option<String>,
}

impl std::str::FromStr for RoleMapping {
    type Err = String;

    /// The group is what comes before the last `=` that a role follows (a group may hold `=`,
    /// as an LDAP DN does).
    fn from_str(text: &str) -> Result<Self, String> {
        let usage = || {
            format!(
                "{text:?}: a mapping is GROUP=ROLE or GROUP=ROLE:PATTERN, e.g. \
                 lazarus-admins=admin or tenant-a=viewer:tenant-a/*"
            )
        };
        let (group, grant) = text
            .rmatch_indices('=')
            .map(|(at, _)| (&text[..at], &text[at + 1..]))
            .find(|(_, rest)| Role::parse(rest.split(':').next().unwrap_or_default()).is_some())
            .ok_or_else(usage)?;
        if group.is_empty() || group.chars().any(char::is_control) {
            return Err(usage());
        }
        let (role, on) = match grant.split_once(':') {
            None => (grant.parse()?, None),
            Some(_) => {
                let grant = Grant::parse(grant)?;
                (grant.role, Some(grant.on))
            }
        };
        Ok(RoleMapping {
            group: group.to_owned(),
            role,
            on,
        })
    }
}

impl std::fmt::Display for RoleMapping {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}={}", self.group, self.role.as_str())?;
        match &self.on {
            Some(on) => write!(f, ":{on}"),
            None => Ok(()),
        }
    }
}

/// What a user's groups give them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mapped {
    pub grants: Grants,
    /// The user's groups that a mapping names, in the order of the mappings (none: the
    /// default role gave the grants).
    pub groups: Vec<String>,
}

/// The grants of a member of `groups`: every mapping of each of their groups, together; the
/// default role everywhere when no group maps; `None` (no access) without a default role.
///
/// A role a group gives everywhere holds on every DLQ: a grant of the same role or a lower
/// one on some DLQs adds nothing to it, and one of a higher role keeps its DLQs — so a viewer
/// everywhere who is an operator of `billing.*` holds `viewer of */*, operator of billing.*`.
/// (A grant on `*/*` is one on every DLQ: routes of the whole archive that want a viewer take
/// that mix too.)
pub fn grants_for(
    mappings: &[RoleMapping],
    groups: &[String],
    default: Option<Role>,
) -> Option<Mapped> {
    let matched: Vec<&RoleMapping> = mappings
        .iter()
        .filter(|m| groups.contains(&m.group))
        .collect();
    let mut names: Vec<String> = Vec::new();
    for m in &matched {
        if !names.contains(&m.group) {
            names.push(m.group.clone());
        }
    }
    let everywhere = matched
        .iter()
        .filter(|m| m.on.is_none())
        .map(|m| m.role)
        .max();
    let mut scoped: Vec<Grant> = Vec::new();
    for m in &matched {
        let Some(on) = &m.on else { continue };
        let grant = Grant {
            role: m.role,
            on: on.clone(),
        };
        if everywhere.is_none_or(|base| m.role > base) && !scoped.contains(&grant) {
            scoped.push(grant);
        }
    }
    let grants = match (everywhere, scoped.is_empty()) {
        (None, true) => {
            return default.map(|role| Mapped {
                grants: Grants::Everywhere(role),
                groups: Vec::new(),
            })
        }
        (Some(role), true) => Grants::Everywhere(role),
        (None, false) => Grants::On(scoped),
        (Some(role), false) => {
            let mut all = vec![Grant {
                role,
                on: EVERY_DLQ.to_owned(),
            }];
            all.extend(scoped);
            Grants::On(all)
        }
    };
    Some(Mapped {
        grants,
        groups: names,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::dlq::Dlq;

    fn mappings(texts: &[&str]) -> Vec<RoleMapping> {
        texts.iter().map(|t| t.parse().unwrap()).collect()
    }

    fn groups(names: &[&str]) -> Vec<String> {
        names.iter().map(|g| g.to_string()).collect()
    }

    #[test]
    fn mappings_are_read_with_their_patterns() {
        let m: RoleMapping = "lazarus-admins=admin".parse().unwrap();
        assert_eq!(
            (m.group.as_str(), m.role, m.on),
            ("lazarus-admins", Role::Admin, None)
        );
        let m: RoleMapping = "tenant-a=viewer:tenant-a/*".parse().unwrap();
        assert_eq!(m.on.as_deref(), Some("tenant-a/*"));
        assert_eq!(m.to_string(), "tenant-a=viewer:tenant-a/*");
        let m: RoleMapping = "cn=ops,ou=groups,dc=example=operator:billing.*"
            .parse()
            .unwrap();
        assert_eq!(m.group, "cn=ops,ou=groups,dc=example");
        assert_eq!(m.role, Role::Operator);
        for bad in [
            "admins",
            "=admin",
            "ops=root",
            "ops=admin:billing.*",
            "ops=viewer:",
        ] {
            assert!(bad.parse::<RoleMapping>().is_err(), "{bad}");
        }
    }

    #[test]
    fn several_groups_give_all_their_grants() {
        let all = mappings(&[
            "admins=admin",
            "ops=operator",
            "staff=viewer",
            "tenant-a=viewer:tenant-a/*",
            "billing=operator:billing.*",
            "billing-read=viewer:billing.*",
        ]);
        let of = |g: &[&str]| grants_for(&all, &groups(g), None).map(|m| m.grants);
        assert_eq!(
            of(&["admins", "tenant-a"]),
            Some(Grants::Everywhere(Role::Admin))
        );
        assert_eq!(
            of(&["staff", "ops"]),
            Some(Grants::Everywhere(Role::Operator))
        );
        // A scoped grant under an unscoped role of its height or more adds nothing.
        assert_eq!(
            of(&["ops", "billing"]),
            Some(Grants::Everywhere(Role::Operator))
        );
        assert_eq!(
            of(&["tenant-a", "billing", "unmapped"]),
            Some(Grants::On(vec![
                Grant::parse("viewer:tenant-a/*").unwrap(),
                Grant::parse("operator:billing.*").unwrap(),
            ]))
        );
        // Viewer everywhere, operator of billing: both hold.
        let mixed = of(&["staff", "billing", "billing-read"]).unwrap();
        assert_eq!(
            mixed,
            Grants::On(vec![
                Grant::parse("viewer:*/*").unwrap(),
                Grant::parse("operator:billing.*").unwrap(),
            ])
        );
        let home = "/";
        let billing = Dlq::parse("billing.dlq", home).unwrap();
        let other = Dlq::parse("tenant-b/orders.dlq", home).unwrap();
        assert_eq!(mixed.role_on(&billing, home), Some(Role::Operator));
        assert_eq!(mixed.role_on(&other, home), Some(Role::Viewer));
    }

    #[test]
    fn no_mapped_group_is_the_default_role_or_no_access() {
        let all = mappings(&["admins=admin", "ops=operator"]);
        assert_eq!(grants_for(&all, &groups(&["staff"]), None), None);
        assert_eq!(grants_for(&all, &[], None), None);
        let default = grants_for(&all, &groups(&["staff"]), Some(Role::Viewer)).unwrap();
        assert_eq!(default.grants, Grants::Everywhere(Role::Viewer));
        assert!(default.groups.is_empty());
        // A mapped group wins over the default, even when it gives less.
        let all = mappings(&["tenant-a=viewer:tenant-a/*"]);
        let mapped = grants_for(&all, &groups(&["tenant-a"]), Some(Role::Operator)).unwrap();
        assert_eq!(mapped.groups, vec!["tenant-a".to_owned()]);
        assert!(matches!(mapped.grants, Grants::On(_)));
    }

    #[test]
    fn group_names_match_exactly() {
        let all = mappings(&["admins=admin"]);
        assert_eq!(
            grants_for(&all, &groups(&["Admins", "admins2"]), None),
            None
        );
    }
}
