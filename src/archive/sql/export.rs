//! Exporting messages whole, the same on both backends: a batch of the selection in id order
//! (the backend finds the ids), cut to a byte budget, read in four statements — the
//! messages, their status times, their bodies (one over a MiB is left in the archive, for
//! its line to read as it is written: [`crate::archive::ExportLine`]), their replays.

use std::collections::HashMap;

use async_trait::async_trait;

use super::bodies::{self, CHUNK_BYTES};
use super::columns::{summary_columns, DETAIL_COLUMNS, REPLAY_COLUMNS};
use super::rows::{message_from_row, replay_from_row};
use super::{args, corrupt, from_millis, ArchiveRow, SqlArchive};
use crate::archive::{
    ArchiveError, Export, ExportedMessage, ExportedReplay, Selection, UnreadBody,
};
use crate::message::codec::table_from_stored_json;

#[async_trait]
impl<T: SqlArchive> Export for T {
    async fn export_batch(
        &self,
        selection: &Selection,
        after: i64,
        limit: u32,
        max_bytes: i64,
    ) -> Result<Vec<ExportedMessage>, ArchiveError> {
        let ids = self.selected_ids(selection, after, limit).await?;
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let db = self.db();
        let d = db.dialect();
        // As many as fit the budget: sixteen 1 MiB bodies are not read at once. A larger body
        // is not read at all: its line reads it as it is written (`ExportLine`).
        let sizes = db
            .fetch_all(
                &format!(
                    "SELECT id, body_size FROM messages WHERE {} ORDER BY id",
                    d.in_ids("id", 1)
                ),
                args![&ids],
            )
            .await?;
        let (mut ids, mut held, mut unread, mut total) =
            (Vec::new(), Vec::new(), HashMap::new(), 0i64);
        for row in &sizes {
            let (id, size): (i64, i64) = (row.column("id")?, row.column("body_size")?);
            if size > CHUNK_BYTES as i64 {
                unread.insert(id, size as u64);
                ids.push(id);
                continue;
            }
            if !ids.is_empty() && total + size > max_bytes {
                break;
            }
            total += size;
            ids.push(id);
            held.push(id);
        }
        let rows = db
            .fetch_all(
                &format!(
                    "SELECT {}, {DETAIL_COLUMNS} FROM messages WHERE {} ORDER BY id",
                    summary_columns(d),
                    d.in_ids("id", 1)
                ),
                args![&ids],
            )
            .await?;
        let mut times = HashMap::new();
        for row in db
            .fetch_all(
                &format!(
                    "SELECT id, status_at, replayed_at FROM {} WHERE {}",
                    d.status_table(),
                    d.in_ids("id", 1)
                ),
                args![&ids],
            )
            .await?
        {
            let at = |name| row.column::<Option<i64>>(name).map(|t| t.map(from_millis));
            times.insert(
                row.column::<i64>("id")?,
                (at("status_at")?, at("replayed_at")?),
            );
        }
        let mut body_of = bodies::whole(self, &held).await?;
        let mut replays: HashMap<i64, Vec<ExportedReplay>> = HashMap::new();
        for row in db
            .fetch_all(
                &format!(
                    "SELECT {REPLAY_COLUMNS}, finished_at, edited_body, edited_headers \
                     FROM replays WHERE {} ORDER BY id",
                    d.in_ids("message_id", 1)
                ),
                args![&ids],
            )
            .await?
        {
            let record = replay_from_row(&row)?;
            let message = record.message_id;
            let headers: Option<String> = row.column("edited_headers")?;
            let replay = ExportedReplay {
                request_key: record.request_key,
                actor: record.actor,
                requested_at: record.requested_at,
                target: record.target,
                outcome: record.outcome,
                detail: record.detail,
                finished_at: row.column::<Option<i64>>("finished_at")?.map(from_millis),
                edited_body: row.column("edited_body")?,
                edited_headers: headers
                    .map(|h| table_from_stored_json(&h))
                    .transpose()
                    .map_err(corrupt(message))?,
            };
            replays.entry(message).or_default().push(replay);
        }
        rows.iter()
            .map(|row| {
                let m = message_from_row(row, Default::default())?;
                let id = m.summary.id;
                let (status_at, replayed_at) = times.remove(&id).unwrap_or_default();
                let unread_body = unread.get(&id).map(|&size| UnreadBody {
                    message_id: id,
                    size,
                });
                let body = match unread_body {
                    Some(_) => Vec::new(),
                    None => body_of.remove(&id).ok_or_else(|| ArchiveError::Corrupt {
                        id,
                        reason: "its body is missing".into(),
                    })?,
                };
                Ok(ExportedMessage {
                    id,
                    body,
                    unread_body,
                    queue: m.summary.queue,
                    vhost: m.summary.vhost,
                    broker: m.summary.broker,
                    archived_at: m.summary.archived_at,
                    exchange: m.delivered_exchange,
                    routing_key: m.delivered_routing_key,
                    redelivered: m.redelivered,
                    properties: m.properties,
                    headers: m.headers,
                    status: m.summary.status,
                    status_note: m.status_note,
                    status_at,
                    replayed_at,
                    replay_of: m.summary.replay_of,
                    replays: replays.remove(&id).unwrap_or_default(),
                })
            })
            .collect()
    }
}
