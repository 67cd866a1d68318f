//! The webhooks' side of the archive, the same on both backends: new failure groups read by
//! when they were first seen, and each watched thing's last told state in `notifications`,
//! changed by a conditional write so that of several instances exactly one changes it.

use async_trait::async_trait;
use time::OffsetDateTime;

use super::rows::group_from_row;
use super::{args, millis, now, SqlArchive};
use crate::archive::{ArchiveError, FailureGroup, Noted, Notices};

#[async_trait]
impl<T: SqlArchive> Notices for T {
    async fn failure_groups_since(
        &self,
        since: OffsetDateTime,
    ) -> Result<Vec<FailureGroup>, ArchiveError> {
        let rows = self
            .db()
            .fetch_all(
                "SELECT queue, reason, error, messages, open_messages, first_seen, last_seen \
                 FROM failure_groups WHERE first_seen >= $1 ORDER BY first_seen",
                args![millis(since)],
            )
            .await?;
        rows.iter().map(group_from_row).collect()
    }

    async fn note_state(&self, key: &str, state: &str) -> Result<Noted, ArchiveError> {
        // The update first: a row in the state already is not written (no write lock taken
        // for nothing), and of two instances changing it at once only one matches.
        let changed = self
            .db()
            .execute(
                "UPDATE notifications SET state = $2, changed_at = $3 \
                 WHERE key = $1 AND state <> $2",
                args![key, state, now()],
            )
            .await?;
        if changed > 0 {
            return Ok(Noted::Changed);
        }
        let inserted = self
            .db()
            .execute(
                "INSERT INTO notifications (key, state, changed_at) VALUES ($1, $2, $3) \
                 ON CONFLICT (key) DO NOTHING",
                args![key, state, now()],
            )
            .await?;
        Ok(if inserted > 0 {
            Noted::New
        } else {
            Noted::Same
        })
    }
}
