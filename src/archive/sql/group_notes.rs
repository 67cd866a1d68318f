//! Failure groups' notes and statuses, the same on both backends: one row per cause group,
//! replaced by each change in the transaction that audits it.

use async_trait::async_trait;

use super::{args, audit, from_millis, millis, now, ArchiveRow, SqlArchive};
use crate::archive::audit_text::group_note_audit;
use crate::archive::{Actor, ArchiveError, GroupNote, GroupNoteChange, GroupNotes, GroupStatus};

#[async_trait]
impl<T: SqlArchive> GroupNotes for T {
    async fn set_group_note(
        &self,
        group: i64,
        change: &GroupNoteChange,
        by: &Actor,
    ) -> Result<GroupNote, ArchiveError> {
        let at = now();
        let until = change.snoozed_until.map(millis);
        let mut tx = self.db().begin().await?;
        tx.conn()
            .execute(
                "INSERT INTO group_notes (group_id, status, note, snoozed_until, noted_by, noted_at) \
                 VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (group_id) DO UPDATE SET \
                 status = excluded.status, note = excluded.note, snoozed_until = excluded.snoozed_until, \
                 noted_by = excluded.noted_by, noted_at = excluded.noted_at",
                args![
                    group,
                    change.status.as_str(),
                    change.note.as_str(),
                    until,
                    by.name.as_str(),
                    at
                ],
            )
            .await?;
        let (action, summary) = group_note_audit(group, change);
        audit(tx.conn(), by, action, None, None, &summary).await?;
        tx.commit().await?;
        Ok(GroupNote {
            status: change.status,
            note: change.note.clone(),
            snoozed_until: change.snoozed_until,
            by: by.name.clone(),
            at: from_millis(at),
        })
    }

    async fn group_notes(&self, groups: &[i64]) -> Result<Vec<(i64, GroupNote)>, ArchiveError> {
        if groups.is_empty() {
            return Ok(Vec::new());
        }
        let db = self.db();
        let sql = format!(
            "SELECT group_id, status, note, snoozed_until, noted_by, noted_at FROM group_notes \
             WHERE {} ORDER BY group_id",
            db.dialect().in_ids("group_id", 1)
        );
        let rows = db.fetch_all(&sql, args![groups]).await?;
        rows.iter()
            .map(|r| {
                let status: String = r.column("status")?;
                Ok((
                    r.column("group_id")?,
                    GroupNote {
                        status: GroupStatus::parse(&status).unwrap_or(GroupStatus::None),
                        note: r.column("note")?,
                        snoozed_until: r.column::<Option<i64>>("snoozed_until")?.map(from_millis),
                        by: r.column("noted_by")?,
                        at: from_millis(r.column("noted_at")?),
                    },
                ))
            })
            .collect()
    }
}
