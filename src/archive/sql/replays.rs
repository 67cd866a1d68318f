//! Single replays, the same on both backends: recorded (with the audit entry) before anything
//! is published, once per request key; the outcome sets the message's status
//! ([`lifecycle::replayed`]).

use async_trait::async_trait;

use super::columns::REPLAY_COLUMNS;
use super::rows::replay_from_row;
use super::{args, audit, edited_headers, lifecycle, millis, now, SqlArchive};
use crate::archive::audit_text::replay_audit;
use crate::archive::PUBLISHING;
use crate::archive::{
    Actor, ArchiveError, Outcome, ReplayEdit, ReplayLog, ReplayRecord, ReplayStart,
};
use crate::message::death::ReplayTarget;

#[async_trait]
impl<T: SqlArchive> ReplayLog for T {
    async fn begin_replay(
        &self,
        message_id: i64,
        request_key: &str,
        actor: &Actor,
        target: &ReplayTarget,
        edit: Option<&ReplayEdit>,
    ) -> Result<ReplayStart, ArchiveError> {
        let edited_headers = edited_headers(message_id, edit)?;
        let mut tx = self.db().begin().await?;
        let inserted = tx
            .conn()
            .fetch_optional(
                "INSERT INTO replays (message_id, request_key, actor, requested_at, target_exchange, \
                 target_routing_key, outcome, edited_body, edited_headers) \
                 VALUES ($1, $2, $3, $4, $5, $6, $9, $7, $8) \
                 ON CONFLICT (request_key) DO NOTHING RETURNING id",
                args![
                    message_id,
                    request_key,
                    &actor.name,
                    now(),
                    &target.exchange,
                    &target.routing_key,
                    edit.and_then(|e| e.body.as_deref()),
                    edited_headers.as_deref(),
                    PUBLISHING,
                ],
            )
            .await?;
        let start = match inserted {
            Some(row) => {
                let (action, summary) = replay_audit(message_id, target, edit);
                audit(tx.conn(), actor, action, None, Some(message_id), &summary).await?;
                ReplayStart::New(super::ArchiveRow::column(&row, "id")?)
            }
            None => {
                let row = tx
                    .conn()
                    .fetch_one(
                        &format!("SELECT {REPLAY_COLUMNS} FROM replays WHERE request_key = $1"),
                        args![request_key],
                    )
                    .await?;
                ReplayStart::Existing(replay_from_row(&row)?)
            }
        };
        tx.commit().await?;
        Ok(start)
    }

    async fn finish_replay(
        &self,
        replay_id: i64,
        outcome: Outcome,
        detail: Option<&str>,
    ) -> Result<ReplayRecord, ArchiveError> {
        let db = self.db();
        let mut tx = db.begin().await?;
        let row = tx
            .conn()
            .fetch_one(
                &format!(
                    "UPDATE replays SET outcome = $1, detail = $2, finished_at = $3 WHERE id = $4 \
                     RETURNING {REPLAY_COLUMNS}"
                ),
                args![outcome.as_str(), detail, now(), replay_id],
            )
            .await?;
        let record = replay_from_row(&row)?;
        lifecycle::replayed(
            &mut tx.conn(),
            &[record.message_id],
            outcome == Outcome::Published,
            millis(record.requested_at),
            now(),
        )
        .await?;
        tx.commit().await?;
        Ok(record)
    }

    async fn replays_of(&self, message_id: i64) -> Result<Vec<ReplayRecord>, ArchiveError> {
        let rows = self
            .db()
            .fetch_all(
                &format!(
                    "SELECT {REPLAY_COLUMNS} FROM replays WHERE message_id = $1 ORDER BY id DESC"
                ),
                args![message_id],
            )
            .await?;
        rows.iter().map(replay_from_row).collect()
    }
}
