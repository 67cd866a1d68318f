//! What `lazarus migrate` carries besides messages, the same on both backends: users and API
//! tokens as stored (password and token hashes, never secrets), replay jobs with their items,
//! and the audit log in its order. Carried again, nothing is added twice: users by name, tokens
//! by hash, jobs by request key, audit entries by multiplicity of their content.

use crate::archive::accounts::stored_grants;
use std::collections::HashMap;

use async_trait::async_trait;

use super::{args, ArchiveRow, SqlArchive};
use crate::archive::{ArchiveError, AuditRow, Carry, ItemRow, JobRow, TokenRow};

const TOKEN_ROW: &str =
    "name, token_hash, role, grants, created_by, created_at, revoked_at, expires_at, owner";
const AUDIT_ROW: &str = "id, at, actor, action, job_id, message_id, summary, source";
const JOB_ROW: &str = "request_key, actor, created_at, selection, target_exchange, \
    target_routing_key, rate_per_sec, include_replayed, canary_count, canary_wait_ms, \
    canary_max_deaths, canary_done, plan, state, detail, started_at, finished_at, published, \
    unroutable, nacked, failed, skipped, cancelled, total, to_first_death_queue";
const JOB_COUNTS: [&str; 7] = [
    "published",
    "unroutable",
    "nacked",
    "failed",
    "skipped",
    "cancelled",
    "total",
];
const ITEM_ROW: &str =
    "message_id, target_exchange, target_routing_key, outcome, detail, attempts, finished_at";
/// Items inserted by one statement (7 arguments each).
const ITEMS_AT_ONCE: usize = 500;

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
                    grants: r.column("grants")?,
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

    async fn job_rows(&self) -> Result<Vec<JobRow>, ArchiveError> {
        let rows = self
            .db()
            .fetch_all(
                &format!("SELECT id, {JOB_ROW} FROM replay_jobs ORDER BY id"),
                args![],
            )
            .await?;
        rows.iter()
            .map(|r| {
                let mut counts = [0; 7];
                for (n, column) in counts.iter_mut().zip(JOB_COUNTS) {
                    *n = r.column(column)?;
                }
                Ok(JobRow {
                    id: r.column("id")?,
                    request_key: r.column("request_key")?,
                    actor: r.column("actor")?,
                    created_at: r.column("created_at")?,
                    selection: r.column("selection")?,
                    target_exchange: r.column("target_exchange")?,
                    target_routing_key: r.column("target_routing_key")?,
                    rate_per_sec: r.column("rate_per_sec")?,
                    include_replayed: r.column("include_replayed")?,
                    canary_count: r.column("canary_count")?,
                    canary_wait_ms: r.column("canary_wait_ms")?,
                    canary_max_deaths: r.column("canary_max_deaths")?,
                    canary_done: r.column("canary_done")?,
                    plan: r.column("plan")?,
                    state: r.column("state")?,
                    detail: r.column("detail")?,
                    started_at: r.column("started_at")?,
                    finished_at: r.column("finished_at")?,
                    counts,
                    to_first_death_queue: r.column("to_first_death_queue")?,
                })
            })
            .collect()
    }

    async fn item_rows(&self, id: i64) -> Result<Vec<ItemRow>, ArchiveError> {
        let rows = self
            .db()
            .fetch_all(
                &format!(
                    "SELECT {ITEM_ROW} FROM replay_job_items WHERE job_id = $1 ORDER BY message_id"
                ),
                args![id],
            )
            .await?;
        rows.iter()
            .map(|r| {
                Ok(ItemRow {
                    message_id: r.column("message_id")?,
                    target_exchange: r.column("target_exchange")?,
                    target_routing_key: r.column("target_routing_key")?,
                    outcome: r.column("outcome")?,
                    detail: r.column("detail")?,
                    attempts: r.column("attempts")?,
                    finished_at: r.column("finished_at")?,
                })
            })
            .collect()
    }

    async fn carry_job(
        &self,
        job: &JobRow,
        items: &[ItemRow],
    ) -> Result<(i64, bool), ArchiveError> {
        let mut tx = self.db().begin().await?;
        let mut conn = tx.conn();
        // A job no runner holds any more: one that was working waits to be resumed here.
        let (state, detail) = match job.state.as_str() {
            "queued" | "running" => (
                "paused",
                Some("migrated from another archive while it was working: resume it to go on"),
            ),
            state => (state, job.detail.as_deref()),
        };
        let placeholders: Vec<String> = (1..=25).map(|n| format!("${n}")).collect();
        let [published, unroutable, nacked, failed, skipped, cancelled, total] = job.counts;
        let added = conn
            .fetch_optional(
                &format!(
                    "INSERT INTO replay_jobs ({JOB_ROW}) VALUES ({}) \
                     ON CONFLICT (request_key) DO NOTHING RETURNING id",
                    placeholders.join(", ")
                ),
                args![
                    &job.request_key,
                    &job.actor,
                    job.created_at,
                    &job.selection,
                    job.target_exchange.as_deref(),
                    job.target_routing_key.as_deref(),
                    job.rate_per_sec,
                    job.include_replayed,
                    job.canary_count,
                    job.canary_wait_ms,
                    job.canary_max_deaths,
                    job.canary_done,
                    &job.plan,
                    state,
                    detail,
                    job.started_at,
                    job.finished_at,
                    published,
                    unroutable,
                    nacked,
                    failed,
                    skipped,
                    cancelled,
                    total,
                    job.to_first_death_queue
                ],
            )
            .await?;
        let Some(row) = added else {
            let id: i64 = conn
                .fetch_one(
                    "SELECT id FROM replay_jobs WHERE request_key = $1",
                    args![&job.request_key],
                )
                .await?
                .column("id")?;
            tx.commit().await?;
            return Ok((id, false));
        };
        let id: i64 = row.column("id")?;
        for chunk in items.chunks(ITEMS_AT_ONCE) {
            let values: Vec<String> = (0..chunk.len())
                .map(|i| {
                    let n = i * 7;
                    format!(
                        "($1, ${}, ${}, ${}, ${}, ${}, ${}, ${})",
                        n + 2,
                        n + 3,
                        n + 4,
                        n + 5,
                        n + 6,
                        n + 7,
                        n + 8
                    )
                })
                .collect();
            let mut arguments = vec![super::Arg::from(id)];
            for item in chunk {
                arguments.extend([
                    super::Arg::from(item.message_id),
                    item.target_exchange.as_deref().into(),
                    item.target_routing_key.as_deref().into(),
                    item.outcome.as_deref().into(),
                    item.detail.as_deref().into(),
                    item.attempts.into(),
                    item.finished_at.into(),
                ]);
            }
            conn.execute(
                &format!(
                    "INSERT INTO replay_job_items (job_id, {ITEM_ROW}) VALUES {}",
                    values.join(", ")
                ),
                &arguments,
            )
            .await?;
        }
        tx.commit().await?;
        Ok((id, true))
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
            let grants = stored_grants(&u.grants);
            added_users += conn
                .execute(
                    "INSERT INTO users (name, password_hash, role, grants, created_at) \
                     VALUES ($1, $2, $3, $4, $5) ON CONFLICT (name) DO NOTHING",
                    args![
                        &u.name,
                        u.password_hash.as_deref(),
                        u.role.as_str(),
                        grants.as_deref(),
                        super::millis(u.created_at)
                    ],
                )
                .await?;
        }
        for t in tokens {
            added_tokens += conn
                .execute(
                    &format!(
                        "INSERT INTO api_tokens ({TOKEN_ROW}) \
                         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) \
                         ON CONFLICT (token_hash) DO NOTHING"
                    ),
                    args![
                        &t.name,
                        &t.token_hash,
                        &t.role,
                        t.grants.as_deref(),
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
