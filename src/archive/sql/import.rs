//! Importing exported messages, the same on both backends: what is archived already, found
//! by fingerprint, and the exported state given back to what ingest stored anew.

use std::collections::HashMap;

use async_trait::async_trait;

use super::lifecycle::{any, set_status};
use super::{args, millis, Conn, SqlArchive};
use crate::archive::{ArchiveError, ExportedMessage, Import};

#[async_trait]
impl<T: SqlArchive> Import for T {
    async fn ids_with_fingerprints(
        &self,
        keys: &[(String, [u8; 32], Option<i64>)],
    ) -> Result<HashMap<(String, [u8; 32]), Vec<i64>>, ArchiveError> {
        let mut out: HashMap<(String, [u8; 32]), Vec<i64>> = keys
            .iter()
            .map(|(queue, fp, _)| ((queue.clone(), *fp), Vec::new()))
            .collect();
        // As ingest looks a possible copy up: through the fingerprint indexes.
        let lookup: Vec<([u8; 32], Option<i64>)> =
            keys.iter().map(|(_, fp, time)| (*fp, *time)).collect();
        for (id, queue, fingerprint) in self.archived_rows(&lookup).await? {
            if let Some(ids) = out.get_mut(&(queue, fingerprint)) {
                ids.push(id);
            }
        }
        Ok(out)
    }

    async fn restore(
        &self,
        messages: &[(i64, &ExportedMessage)],
        untouched_only: bool,
    ) -> Result<(), ArchiveError> {
        let mut tx = self.db().begin().await?;
        let mut conn = tx.conn();
        let d = conn.dialect();
        for (id, m) in messages {
            if untouched_only {
                let untouched = conn
                    .fetch_optional(
                        &format!(
                            "SELECT 1 AS untouched FROM {} WHERE id = $1 \
                             AND status = 'archived' AND status_at IS NULL",
                            d.status_table()
                        ),
                        args![*id],
                    )
                    .await?
                    .is_some();
                if !untouched {
                    restore_replays(&mut conn, *id, m).await?;
                    continue;
                }
            }
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
            restore_replays(&mut conn, *id, m).await?;
        }
        tx.commit().await?;
        Ok(())
    }
}

/// The replay records of `m` not recorded yet (by request key), for message `id`.
async fn restore_replays(
    conn: &mut Conn<'_>,
    id: i64,
    m: &ExportedMessage,
) -> Result<(), sqlx::Error> {
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
                id,
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
    Ok(())
}
