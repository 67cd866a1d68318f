//! Bodies over a MiB, stored in pieces: read back whole and in parts across the pieces'
//! edges, exported, handed out to a job (to be read as published), reindexed, recognised
//! when redelivered, deleted with their message — and a body archived whole before pieces
//! existed still read as it was.

use lazarus::archive::{
    read_unread_body, ExportLine, ExportedMessage, IngestRules, JobAction, JobStep, OutgoingBody,
};

use crate::helpers::*;

use super::*;

const MIB: usize = 1024 * 1024;

/// `size` bytes that say where they are (a piece out of place or order shows).
fn numbered(size: usize) -> Vec<u8> {
    (0..size)
        .map(|i| (i % 251) as u8 ^ (i / MIB) as u8)
        .collect()
}

fn with_body(name: &str, body: Vec<u8>) -> IncomingMessage {
    let mut m = delivery("big.dlq", name, Some(REJECTED));
    m.properties.content_type = Some("application/octet-stream".into());
    m.body = body;
    m
}

/// Every part of `id`'s body that a reader could ask for — across the first piece's end
/// and the next pieces', at the end and past it — is `body`'s.
async fn parts_are(archive: &dyn Archive, id: i64, body: &[u8]) {
    let size = body.len() as u64;
    let start = archive.body_start(id, 100).await.unwrap().unwrap();
    assert_eq!(start.size, size, "{id}: its size");
    assert_eq!(start.body.bytes, body[..body.len().min(100)]);
    let two = archive.body_start(id, 2 * MIB).await.unwrap().unwrap();
    assert_eq!(two.body.bytes, body[..body.len().min(2 * MIB)]);
    for (offset, len) in [
        (0, MIB),
        (MIB as u64 - 5, 10),
        (MIB as u64 - 5, 2 * MIB + 10),
        (MIB as u64, MIB),
        (MIB as u64 + 3, MIB),
        (2 * MIB as u64 - 1, 2),
        (size.saturating_sub(3), 10),
        (size, 10),
        (size + 5, 10),
    ] {
        let part = archive.body_part(id, offset, len).await.unwrap().unwrap();
        let from = (offset as usize).min(body.len());
        let to = (from + len).min(body.len());
        assert_eq!(part.len(), to - from, "{id}: {len} from {offset}");
        assert!(part == body[from..to], "{id}: {len} from {offset}");
    }
    let whole = archive.get_body(id).await.unwrap().unwrap();
    assert!(whole.bytes == body, "{id}: read whole");
}

on_both_backends!(a_body_over_a_mib_is_stored_in_pieces_and_read_back_whole_and_in_parts);
async fn a_body_over_a_mib_is_stored_in_pieces_and_read_back_whole_and_in_parts() {
    let dir = tempfile::tempdir().unwrap();
    let url = archive_url(dir.path()).await;
    let archive = lazarus::archive::open(&url).await.unwrap();
    let archive = &*archive;
    let sizes = [10, MIB, MIB + 1, 3 * MIB + MIB / 2];
    let bodies: Vec<Vec<u8>> = sizes.iter().map(|s| numbered(*s)).collect();
    let names = ["small", "one-piece", "two-pieces", "four-pieces"];
    let batch = names
        .iter()
        .zip(&bodies)
        .map(|(name, body)| with_body(name, body.clone()))
        .collect();
    assert_eq!(store(archive, batch).await, (4, 0));
    assert_eq!(
        count_rows(&url, "SELECT count(*) FROM message_body_chunks").await,
        4,
        "the pieces past the first MiB: none, none, one, three"
    );
    let id = listed_ids(archive, "big.dlq").await;
    for (id, body) in id.iter().zip(&bodies) {
        parts_are(archive, *id, body).await;
    }
    let summaries = listed(archive, "big.dlq").await;
    assert_eq!(
        summaries.iter().map(|m| m.body_size).collect::<Vec<_>>(),
        sizes.map(|s| s as i64)
    );

    // A redelivery of the largest is recognised, pieces and all: nothing is stored again.
    let mut again = with_body("four-pieces", bodies[3].clone());
    again.redelivered = true;
    assert_eq!(store(archive, vec![again]).await, (0, 1));
    assert_eq!(
        count_rows(&url, "SELECT count(*) FROM message_body_chunks").await,
        4
    );

    // Exported: a body up to a MiB in the batch, a larger one left in the archive and read
    // as its line is written; the lines are what the whole messages write.
    let mut exported = archive
        .export_batch(&of_queue("big.dlq"), 0, 10, MIB as i64 + 10)
        .await
        .unwrap();
    assert_eq!(
        exported.len(),
        4,
        "the larger bodies take none of the budget"
    );
    for (m, body) in exported.iter_mut().zip(&bodies) {
        assert_eq!(m.unread_body.is_some(), body.len() > MIB, "{}", m.id);
        exported_line_is(archive, m, body).await;
    }

    // A job hands out a body up to a MiB, and the size of a larger one to read as published.
    let job = job(archive, "big", &of_queue("big.dlq")).await.id;
    archive
        .claim_job("runner", None, 60_000, None)
        .await
        .unwrap()
        .expect("claimed");
    let JobStep::Publish(messages) = step(archive, job, "runner", 60_000, &[], 10).await else {
        panic!("a step to publish");
    };
    let handed: Vec<(i64, &OutgoingBody)> =
        messages.iter().map(|m| (m.message_id, &m.body)).collect();
    assert_eq!(
        handed,
        [
            (id[0], &OutgoingBody::Held(bodies[0].clone())),
            (id[1], &OutgoingBody::Held(bodies[1].clone())),
            (
                id[2],
                &OutgoingBody::Archived {
                    size: MIB as u64 + 1
                }
            ),
            (
                id[3],
                &OutgoingBody::Archived {
                    size: sizes[3] as u64
                }
            ),
        ]
    );
    archive
        .control_job(job, JobAction::Cancel, &Actor::system("test"))
        .await
        .unwrap();

    // Purged, pieces and all.
    let purged = archive
        .purge(
            &of_queue("big.dlq"),
            "big.dlq",
            "cleanup",
            &Actor::system("test"),
        )
        .await
        .unwrap();
    assert_eq!(purged, 4);
    assert_eq!(
        count_rows(&url, "SELECT count(*) FROM message_body_chunks").await,
        0
    );
    assert!(archive.body_part(id[3], 0, 10).await.unwrap().is_none());
}

on_both_backends!(a_body_archived_whole_before_pieces_is_read_as_it_was);
/// An archive from before pieces: a 3.5 MiB body whole in `message_bodies`. Every reader
/// reads it as before — its parts, whole, exported, handed out to read as published.
async fn a_body_archived_whole_before_pieces_is_read_as_it_was() {
    let dir = tempfile::tempdir().unwrap();
    let url = archive_url(dir.path()).await;
    let archive = lazarus::archive::open(&url).await.unwrap();
    let archive = &*archive;
    let body = numbered(3 * MIB + MIB / 2);
    assert_eq!(
        store(archive, vec![with_body("old", b"{}".to_vec())]).await,
        (1, 0)
    );
    let id = listed_ids(archive, "big.dlq").await[0];
    store_whole(&url, id, &body).await;
    assert_eq!(
        count_rows(&url, "SELECT count(*) FROM message_body_chunks").await,
        0
    );
    parts_are(archive, id, &body).await;
    let mut exported = archive
        .export_batch(&of_queue("big.dlq"), 0, 10, MIB as i64)
        .await
        .unwrap();
    exported_line_is(archive, &mut exported[0], &body).await;
    let job = job(archive, "old", &of_queue("big.dlq")).await.id;
    archive
        .claim_job("runner", None, 60_000, None)
        .await
        .unwrap()
        .expect("claimed");
    let JobStep::Publish(messages) = step(archive, job, "runner", 60_000, &[], 10).await else {
        panic!("a step to publish");
    };
    assert_eq!(
        messages[0].body,
        OutgoingBody::Archived {
            size: body.len() as u64
        }
    );
}

/// `m`'s export line, written a piece at a time, is the line of the whole message with
/// `body`; and its body, read whole (as `lazarus migrate` does), is `body`.
async fn exported_line_is(archive: &dyn Archive, m: &mut ExportedMessage, body: &[u8]) {
    let mut line = ExportLine::new(m);
    let mut written = Vec::new();
    while let Some(piece) = line.next(archive).await.unwrap() {
        written.extend_from_slice(&piece);
    }
    assert_eq!(written.len() as u64, line.len(), "{}: its length", m.id);
    let mut whole = m.clone();
    whole.body = body.to_vec();
    let mut expected = serde_json::to_vec(&whole).unwrap();
    expected.push(b'\n');
    assert!(written == expected, "{}: its line", m.id);
    read_unread_body(archive, m).await.unwrap();
    assert!(
        m.body == body && m.unread_body.is_none(),
        "{}: read whole",
        m.id
    );
}

/// Makes message `id`'s body `body`, stored whole in `message_bodies` as before pieces.
async fn store_whole(url: &str, id: i64, body: &[u8]) {
    use sqlx::Connection;
    if url.starts_with("sqlite://") {
        let mut conn = sqlx::SqliteConnection::connect(url).await.unwrap();
        sqlx::query("UPDATE message_bodies SET body = ? WHERE message_id = ?")
            .bind(body)
            .bind(id)
            .execute(&mut conn)
            .await
            .unwrap();
        sqlx::query("UPDATE messages SET body_size = ? WHERE id = ?")
            .bind(body.len() as i64)
            .bind(id)
            .execute(&mut conn)
            .await
            .unwrap();
    } else {
        let mut conn = sqlx::PgConnection::connect(url).await.unwrap();
        sqlx::query("UPDATE message_bodies SET body = $1 WHERE message_id = $2")
            .bind(body)
            .bind(id)
            .execute(&mut conn)
            .await
            .unwrap();
        sqlx::query("UPDATE messages SET body_size = $1 WHERE id = $2")
            .bind(body.len() as i64)
            .bind(id)
            .execute(&mut conn)
            .await
            .unwrap();
    }
}

on_both_backends!(a_body_in_pieces_is_reindexed_from_all_of_them);
/// Under `--mask`, a 3 MiB JSON body is indexed masked, which takes all of it (a JSON body
/// cut at its first MiB does not parse, and is not indexed): the reindex reads it whole,
/// and indexes it as ingest did.
async fn a_body_in_pieces_is_reindexed_from_all_of_them() {
    let dir = tempfile::tempdir().unwrap();
    let url = archive_url(dir.path()).await;
    let archive = lazarus::archive::open(&url).await.unwrap();
    let archive = &*archive;
    let rules = IngestRules {
        masks: vec!["/card".into()],
        ..Default::default()
    };
    let mut body = br#"{"word": "zebracorn \u0041", "card": "4111", "pad": ""#.to_vec();
    body.resize(3 * MIB, b'x');
    body.extend_from_slice(br#""}"#);
    let mut m = delivery("big.dlq", "masked", None);
    m.body = body;
    let prepared = PreparedMessage::with_rules(m, &rules);
    assert_eq!(archive.store_batch(&[prepared]).await.unwrap().inserted, 1);
    assert_eq!(found(archive, "zebracorn").await, ["masked"]);
    assert!(found(archive, "4111").await.is_empty(), "masked");
    // Its entry to be made again: version 1 reads JSON's `\u` escapes anew.
    execute_sql(
        &url,
        "DELETE FROM search_reindex; INSERT INTO search_reindex (version, next_id, last_id) \
         VALUES (1, 1, (SELECT max(id) FROM messages));",
    )
    .await;
    let mut rewritten = 0;
    while let Some(progress) = archive.reindex_batch(&rules, 500).await.unwrap() {
        rewritten += progress.rewritten;
    }
    assert_eq!(rewritten, 1);
    assert_eq!(found(archive, "zebracorn").await, ["masked"]);
    assert!(found(archive, "4111").await.is_empty(), "still masked");
}
