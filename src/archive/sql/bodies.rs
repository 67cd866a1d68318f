//! Bodies in pieces, the same on both backends: a body's first MiB in `message_bodies` (all
//! of a body of up to a MiB, as every body was stored before pieces), the rest in
//! `message_body_chunks`, a row of at most a MiB per byte offset. Written by ingest in the
//! transaction of its message, one statement a piece, and read a piece at a time (a page, a
//! download, a replay) or whole (an export, the reindex), so that no statement binds and no
//! read loads more than a MiB of one body beside the one copy a reader asked for.

use std::collections::HashMap;

use super::{args, ArchiveRow, Conn, Pool, SqlArchive};

/// The largest piece of a body one row holds.
pub const CHUNK_BYTES: usize = 1024 * 1024;

/// A stored body's size in bytes, for a row `b` of `message_bodies`: its first piece and the
/// others (`length()` reads a stored value's size, not its bytes, on both backends).
pub const STORED_SIZE: &str = "CAST(length(b.body) + coalesce((SELECT sum(length(c.data)) \
     FROM message_body_chunks c WHERE c.message_id = b.message_id), 0) AS BIGINT)";

/// What of `body` goes into `message_bodies`: all of it, up to a MiB.
pub fn head(body: &[u8]) -> &[u8] {
    &body[..body.len().min(CHUNK_BYTES)]
}

/// Whether `body` has pieces past its head.
pub fn has_rest(body: &[u8]) -> bool {
    body.len() > CHUNK_BYTES
}

/// The pieces of `body` past its head, with their byte offsets.
fn rest(body: &[u8]) -> impl Iterator<Item = (i64, &[u8])> {
    body.get(CHUNK_BYTES..)
        .unwrap_or_default()
        .chunks(CHUNK_BYTES)
        .enumerate()
        .map(|(n, piece)| (((n + 1) * CHUNK_BYTES) as i64, piece))
}

/// Writes the pieces of message `id`'s body past its head (stored by the caller), each by a
/// statement of its own, in the transaction `conn` is in.
pub async fn write_rest(conn: &mut Conn<'_>, id: i64, body: &[u8]) -> Result<(), sqlx::Error> {
    for (at, piece) in rest(body) {
        conn.execute(
            "INSERT INTO message_body_chunks (message_id, at, data) VALUES ($1, $2, $3)",
            args![id, at, Some(piece)],
        )
        .await?;
    }
    Ok(())
}

/// `len` bytes of message `id`'s body from byte `offset` (fewer at its end) out of its
/// pieces past the head: nothing for a body without them, nor for bytes of its head.
pub async fn read_rest(
    db: Pool<'_>,
    id: i64,
    offset: u64,
    len: usize,
) -> Result<Vec<u8>, sqlx::Error> {
    // A part is cut by `substr()`, which counts in 32-bit integers on PostgreSQL.
    let len = len.min(i32::MAX as usize);
    let (start, end) = (offset as i64, offset.saturating_add(len as u64) as i64);
    // The piece holding `offset` (found through the key, not by the pieces' lengths) and
    // those after it up to `end`, each cut to what is asked for.
    let rows = db
        .fetch_all(
            "SELECT substr(data, CAST(CASE WHEN $2 > at THEN $2 - at + 1 ELSE 1 END AS INTEGER), \
             CAST($3 AS INTEGER)) AS part FROM message_body_chunks \
             WHERE message_id = $1 AND at < $4 AND at >= coalesce((SELECT max(at) \
             FROM message_body_chunks WHERE message_id = $1 AND at <= $2), 0) ORDER BY at",
            args![id, start, len as i64, end],
        )
        .await?;
    let mut out = Vec::new();
    for row in rows {
        let part: Vec<u8> = row.column("part")?;
        out.extend_from_slice(&part[..part.len().min(len - out.len())]);
        if out.len() == len {
            break;
        }
    }
    Ok(out)
}

/// The whole bodies of messages `ids` (those that have one), each read into a buffer of its
/// size: a body of up to a MiB with the others in one statement, a larger one (or a first
/// piece stored larger, before pieces) a piece at a time. The caller bounds how many bytes
/// it asks for at once.
pub async fn whole<A: SqlArchive + ?Sized>(
    archive: &A,
    ids: &[i64],
) -> Result<HashMap<i64, Vec<u8>>, sqlx::Error> {
    let mut out = HashMap::new();
    if ids.is_empty() {
        return Ok(out);
    }
    let db = archive.db();
    let sql = format!(
        "SELECT b.message_id, CASE WHEN length(b.body) <= {CHUNK_BYTES} THEN b.body END AS head, \
         {STORED_SIZE} AS size FROM message_bodies b WHERE {}",
        db.dialect().in_ids("b.message_id", 1)
    );
    for row in db.fetch_all(&sql, args![ids]).await? {
        let id: i64 = row.column("message_id")?;
        let size = row.column::<i64>("size")?.max(0) as usize;
        let mut body = row.column::<Option<Vec<u8>>>("head")?.unwrap_or_default();
        if body.len() < size {
            body.reserve_exact(size - body.len());
            while body.len() < size {
                let want = (size - body.len()).min(CHUNK_BYTES);
                match archive.read_body_part(id, body.len() as u64, want).await? {
                    Some(piece) if !piece.is_empty() => body.extend_from_slice(&piece),
                    // Deleted meanwhile: what was read is all there is.
                    _ => break,
                }
            }
        }
        out.insert(id, body);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_body_is_its_head_and_its_pieces_in_order() {
        for size in [
            0,
            1,
            CHUNK_BYTES - 1,
            CHUNK_BYTES,
            CHUNK_BYTES + 1,
            3 * CHUNK_BYTES,
            3 * CHUNK_BYTES + 7,
        ] {
            let body: Vec<u8> = (0..size).map(|i| (i % 251) as u8).collect();
            let mut again = head(&body).to_vec();
            for (at, piece) in rest(&body) {
                assert_eq!(at as usize, again.len(), "{size}: pieces follow each other");
                assert!(!piece.is_empty() && piece.len() <= CHUNK_BYTES, "{size}");
                again.extend_from_slice(piece);
            }
            assert_eq!(again, body, "{size}");
            assert_eq!(has_rest(&body), size > CHUNK_BYTES, "{size}");
            assert_eq!(
                rest(&body).count(),
                size.saturating_sub(1) / CHUNK_BYTES,
                "{size}"
            );
        }
    }
}
