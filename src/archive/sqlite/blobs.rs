//! Bodies' first pieces (`message_bodies`) read a part at a time from the SQLite file with
//! SQLite's incremental blob I/O (a read-only connection of its own): `substr()` would load
//! the whole value into memory to cut a part of it — 100 MiB for every 1 KiB of a 100 MiB
//! body archived whole before bodies were stored in pieces (a first piece is a MiB now).

use std::path::PathBuf;
use std::time::Duration;

use rusqlite::{Connection, DatabaseName, OpenFlags, OptionalExtension};

/// The archive file whose bodies are read.
#[derive(Debug, Clone)]
pub struct Blobs {
    pub file: PathBuf,
}

impl Blobs {
    /// `len` bytes of message `id`'s body from byte `offset` (fewer at its end); `None`
    /// when it has none. Blocking: call it off the async threads.
    pub fn read(&self, id: i64, offset: u64, len: usize) -> rusqlite::Result<Option<Vec<u8>>> {
        let conn = Connection::open_with_flags(
            &self.file,
            OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )?;
        conn.busy_timeout(Duration::from_secs(5))?;
        // The row's existence and the blob are read in one transaction: one snapshot.
        conn.execute_batch("BEGIN")?;
        let exists = conn
            .query_row(
                "SELECT 1 FROM message_bodies WHERE message_id = ?1",
                [id],
                |_| Ok(()),
            )
            .optional()?;
        if exists.is_none() {
            return Ok(None);
        }
        let blob = conn.blob_open(DatabaseName::Main, "message_bodies", "body", id, true)?;
        let size = blob.len() as u64;
        let start = offset.min(size);
        let mut out = vec![0u8; (size - start).min(len as u64) as usize];
        blob.read_at_exact(&mut out, start as usize)?;
        Ok(Some(out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pieces_of_a_body_and_of_none() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("a.db");
        let conn = Connection::open(&file).unwrap();
        conn.execute_batch(
            "CREATE TABLE message_bodies (message_id INTEGER PRIMARY KEY, body BLOB NOT NULL);
             INSERT INTO message_bodies VALUES (7, x'0102030405');",
        )
        .unwrap();
        let blobs = Blobs { file };
        assert_eq!(blobs.read(7, 1, 3).unwrap(), Some(vec![2, 3, 4]));
        assert_eq!(blobs.read(7, 3, 100).unwrap(), Some(vec![4, 5]));
        assert_eq!(blobs.read(7, 9, 100).unwrap(), Some(vec![]));
        assert_eq!(blobs.read(8, 0, 100).unwrap(), None);
    }
}
