//! The webhooks' side of the archive, the same on both backends: new failure groups (by
//! cause) read by when they were first seen, and each watched thing's last told state in `notifications`,
//! changed by a conditional write so that of several instances exactly one changes it.

use async_trait::async_trait;
use time::OffsetDateTime;

use super::{args, millis, now, SqlArchive};
use crate::archive::{ArchiveError, FailureGroup, GroupQuery, Noted, Notices};

#[async_trait]
impl<T: SqlArchive> Notices for T {
    async fn failure_groups_since(
        &self,
        since: OffsetDateTime,
    ) -> Result<Vec<FailureGroup>, ArchiveError> {
        let every = GroupQuery::by_cause(u32::MAX / 2);
        super::groups::read(self.db(), &every, Some(millis(since))).await
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
