//! Importing exported messages, the same on both backends: what is archived already, found
//! by fingerprint, and the exported state given back to what ingest stored anew.

use async_trait::async_trait;

use super::lifecycle::{any, set_status};
use super::{args, millis, ArchiveRow, SqlArchive};
use crate::archive::{ArchiveError, ExportedMessage, Import};

#[async_trait]
impl<T: SqlArchive> Import for T {
    async fn ids_with_fingerprint(
        &self,
        queue: &str,
        fingerprint: &[u8; 32],
    ) -> Result<Vec<i64>, ArchiveError> {
        let rows = self
            .db()
            .fetch_all(
                "SELECT id FROM messages WHERE fingerprint = $1 AND queue = $2 ORDER BY id",
                args![Some(&fingerprint[..]), queue],
            )
            .await?;
        rows.iter()
            .map(|r| r.column("id"))
            .collect::<Result<_, sqlx::Error>>()
            .map_err(ArchiveError::from)
    }

    async fn restore(&self, messages: &[(i64, &ExportedMessage)]) -> Result<(), ArchiveError> {
        let mut tx = self.db().begin().await?;
        let mut conn = tx.conn();
        let d = conn.dialect();
        for (id, m) in messages {
            let replayed_at = m.replayed_at.map(millis);
            set_status(&mut conn, &[*id], m.status, any, replayed_at).await?;
            conn.execute(
                &format!(
                    "UPDATE {} SET status_at = $1, replayed_at = $2 WHERE id = $3",
                    d.status_table()
                ),
                args![m.status_at.map(millis), replayed_at, *id],
            )
            .await?;
            conn.execute(
                "UPDATE messages SET status_note = $1, redelivered = $2 WHERE id = $3",
                args![m.status_note.as_deref(), m.redelivered, *id],
            )
            .await?;
            for r in &m.replays {
                let headers = r
                    .edited_headers
                    .as_ref()
                    .map(|h| serde_json::to_string(h).expect("tables serialize"));
                conn.execute(
                    "INSERT INTO replays (message_id, request_key, actor, requested_at, \
                     target_exchange, target_routing_key, outcome, detail, finished_at, \
                     edited_body, edited_headers) \
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11) \
                     ON CONFLICT (request_key) DO NOTHING",
                    args![
                        *id,
                        r.request_key.as_str(),
                        r.actor.as_str(),
                        millis(r.requested_at),
                        r.target.exchange.as_str(),
                        r.target.routing_key.as_str(),
                        r.outcome.as_str(),
                        r.detail.as_deref(),
                        r.finished_at.map(millis),
                        r.edited_body.as_deref(),
                        headers.as_deref(),
                    ],
                )
                .await?;
            }
        }
        tx.commit().await?;
        Ok(())
    }
}
