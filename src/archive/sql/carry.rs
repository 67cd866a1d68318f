//! What `lazarus migrate` carries besides messages, the same on both backends: users and API
//! tokens as stored (password and token hashes, never secrets), and the audit log in its order.
//! Carried again, nothing is added twice: users by name, tokens by hash, audit entries by
//! multiplicity of their content.

use std::collections::HashMap;

use async_trait::async_trait;

use super::{args, ArchiveRow, SqlArchive};
use crate::archive::{ArchiveError, AuditRow, Carry, TokenRow};

const TOKEN_ROW: &str =
    "name, token_hash, role, created_by, created_at, revoked_at, expires_at, owner";
const AUDIT_ROW: &str = "id, at, actor, action, job_id, message_id, summary, source";

fn audit_key(row: &AuditRow) -> (i64, String, String, String, Option<String>, Option<i64>) {
    (
        row.at,
        row.actor.clone(),
        row.action.clone(),
        row.summary.clone(),
        row.source.clone(),
        row.message_id,
    )
}

#[async_trait]
impl<T: SqlArchive> Carry for T {
    async fn token_rows(&self) -> Result<Vec<TokenRow>, ArchiveError> {
        let rows = self
            .db()
            .fetch_all(
                &format!("SELECT {TOKEN_ROW} FROM api_tokens ORDER BY id"),
                args![],
            )
            .await?;
        rows.iter()
            .map(|r| {
                Ok(TokenRow {
                    name: r.column("name")?,
                    token_hash: r.column("token_hash")?,
                    role: r.column("role")?,
                    created_by: r.column("created_by")?,
                    created_at: r.column("created_at")?,
                    revoked_at: r.column("revoked_at")?,
                    expires_at: r.column("expires_at")?,
                    owner: r.column("owner")?,
                })
            })
            .collect()
    }

    async fn audit_rows(&self, after: i64, limit: u32) -> Result<Vec<AuditRow>, ArchiveError> {
        let rows = self
            .db()
            .fetch_all(
                &format!("SELECT {AUDIT_ROW} FROM audit_log WHERE id > $1 ORDER BY id LIMIT $2"),
                args![after, i64::from(limit)],
            )
            .await?;
        rows.iter()
            .map(|r| {
                Ok(AuditRow {
                    id: r.column("id")?,
                    at: r.column("at")?,
                    actor: r.column("actor")?,
                    action: r.column("action")?,
                    job_id: r.column("job_id")?,
                    message_id: r.column("message_id")?,
                    summary: r.column("summary")?,
                    source: r.column("source")?,
                })
            })
            .collect()
    }

    async fn carry_accounts(
        &self,
        users: &[crate::archive::UserRecord],
        tokens: &[TokenRow],
    ) -> Result<(u64, u64), ArchiveError> {
        let mut tx = self.db().begin().await?;
        let mut conn = tx.conn();
        let (mut added_users, mut added_tokens) = (0, 0);
        for u in users {
            added_users += conn
                .execute(
                    "INSERT INTO users (name, password_hash, role, created_at) \
                     VALUES ($1, $2, $3, $4) ON CONFLICT (name) DO NOTHING",
                    args![
                        &u.name,
                        u.password_hash.as_deref(),
                        u.role.as_str(),
                        super::millis(u.created_at)
                    ],
                )
                .await?;
        }
        for t in tokens {
            added_tokens += conn
                .execute(
                    &format!(
                        "INSERT INTO api_tokens ({TOKEN_ROW}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8) \
                         ON CONFLICT (token_hash) DO NOTHING"
                    ),
                    args![
                        &t.name,
                        &t.token_hash,
                        &t.role,
                        &t.created_by,
                        t.created_at,
                        t.revoked_at,
                        t.expires_at,
                        t.owner.as_deref()
                    ],
                )
                .await?;
        }
        tx.commit().await?;
        Ok((added_users, added_tokens))
    }

    async fn carry_audit(&self, entries: &[AuditRow]) -> Result<u64, ArchiveError> {
        // What the archive holds already, by content: the n-th entry of a content is added
        // only while fewer than n are there.
        let mut held: HashMap<_, usize> = HashMap::new();
        for row in self.all_audit_rows().await? {
            *held.entry(audit_key(&row)).or_default() += 1;
        }
        let mut tx = self.db().begin().await?;
        let mut conn = tx.conn();
        let mut added = 0;
        for entry in entries {
            let key = audit_key(entry);
            match held.get_mut(&key) {
                Some(n) if *n > 0 => *n -= 1,
                _ => {
                    added += conn
                        .execute(
                            "INSERT INTO audit_log \
                             (at, actor, action, job_id, message_id, summary, source) \
                             VALUES ($1, $2, $3, $4, $5, $6, $7)",
                            args![
                                entry.at,
                                &entry.actor,
                                &entry.action,
                                entry.job_id,
                                entry.message_id,
                                &entry.summary,
                                entry.source.as_deref()
                            ],
                        )
                        .await?;
                }
            }
        }
        tx.commit().await?;
        Ok(added)
    }
}
