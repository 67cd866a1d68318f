//! `lazarus import`: reads what `lazarus export` wrote back into an archive, a batch at a
//! time, through ingest (search, totals, groups and fields are derived as for a delivery),
//! then gives each stored message its exported status, note, times and replays. Idempotent:
//! the n-th line with a given queue and fingerprint is stored only while the archive holds
//! fewer than n such messages, so importing twice adds nothing.

use std::collections::HashMap;
use std::io::BufRead;

use anyhow::Context;

use crate::archive::{
    self, Archive, ExportedMessage, IncomingMessage, IngestRules, MessageStatus, PreparedMessage,
};
use crate::config::{redact_url, ImportConfig};

/// Lines read at a time, at most…
const BATCH: usize = 500;
/// …and body bytes.
const BATCH_BYTES: usize = 8 * 1024 * 1024;

/// What an import did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Imported {
    pub stored: u64,
    /// Already in the archive (an earlier import, or the archive it was exported from).
    pub present: u64,
}

/// Reads the whole export from `input` into `archive`.
pub async fn import(
    archive: &dyn Archive,
    input: &mut dyn BufRead,
    home_vhost: &str,
    rules: &IngestRules,
) -> anyhow::Result<Imported> {
    let mut state = Importer::default();
    let (mut batch, mut bytes, mut number) = (Vec::new(), 0, 0usize);
    let mut line = String::new();
    loop {
        line.clear();
        let read = input.read_line(&mut line).context("reading the export")?;
        if read > 0 && !line.trim().is_empty() {
            number += 1;
            let m: ExportedMessage = serde_json::from_str(line.trim_end())
                .with_context(|| format!("line {number} is not an exported message"))?;
            bytes += m.body.len();
            batch.push(m.stored(home_vhost));
        }
        if !batch.is_empty() && (read == 0 || batch.len() >= BATCH || bytes >= BATCH_BYTES) {
            state.store(archive, &batch, rules).await?;
            batch.clear();
            bytes = 0;
        }
        if read == 0 {
            return Ok(state.imported());
        }
    }
}

/// Storing exported messages batch after batch (an import, a migration): what it remembers
/// from one batch to the next.
#[derive(Default)]
pub struct Importer {
    /// How many lines so far had each (queue, fingerprint).
    seen: HashMap<(String, [u8; 32]), usize>,
    /// Exported id → id in this archive, for the replayed copies that point at them.
    ids: HashMap<i64, i64>,
    imported: Imported,
}

impl Importer {
    /// What it did so far.
    pub fn imported(&self) -> Imported {
        self.imported
    }

    /// The id in this archive of the message exported as `id` (stored or found present).
    pub fn id_of(&self, id: i64) -> Option<i64> {
        self.ids.get(&id).copied()
    }

    /// Stores what of `batch` the archive does not hold yet, in order.
    pub async fn store(
        &mut self,
        archive: &dyn Archive,
        batch: &[ExportedMessage],
        rules: &IngestRules,
    ) -> anyhow::Result<()> {
        // A replayed copy of a message of the same batch: the original is stored first, so
        // that the copy can point at its new id.
        let mut start = 0;
        for (i, m) in batch.iter().enumerate() {
            if m.replay_of
                .is_some_and(|of| batch[start..i].iter().any(|b| b.id == of))
            {
                self.store_part(archive, &batch[start..i], rules).await?;
                start = i;
            }
        }
        self.store_part(archive, &batch[start..], rules).await
    }

    async fn store_part(
        &mut self,
        archive: &dyn Archive,
        batch: &[ExportedMessage],
        rules: &IngestRules,
    ) -> anyhow::Result<()> {
        if batch.is_empty() {
            return Ok(());
        }
        // Each line with its place among the lines of its queue and fingerprint.
        let mut prepared = Vec::with_capacity(batch.len());
        for m in batch {
            let mut p = PreparedMessage::with_rules(incoming(m), rules);
            p.replay_of = m.replay_of.and_then(|old| self.ids.get(&old).copied());
            let n = self
                .seen
                .entry((m.queue.clone(), p.fingerprint))
                .or_default();
            *n += 1;
            prepared.push((p, *n));
        }
        let keys: Vec<(String, [u8; 32])> = prepared
            .iter()
            .map(|(p, _)| (p.message.queue.clone(), p.fingerprint))
            .collect();
        let archived = archive.ids_with_fingerprints(&keys).await?;
        let (mut fresh, mut fresh_lines, mut present) = (Vec::new(), Vec::new(), Vec::new());
        for ((p, n), m) in prepared.into_iter().zip(batch) {
            let key = (p.message.queue.clone(), p.fingerprint);
            match archived[&key].get(n - 1) {
                Some(id) => {
                    self.ids.insert(m.id, *id);
                    self.imported.present += 1;
                    if has_state(m) {
                        present.push((*id, m));
                    }
                }
                None => {
                    fresh_lines.push((m, key, n));
                    fresh.push(p);
                }
            }
        }
        // An import cut short between storing a batch and restoring it left those messages
        // as ingest stores them: they get their state now (and nothing else is changed).
        if !present.is_empty() {
            archive.restore(&present, true).await?;
        }
        if fresh.is_empty() {
            return Ok(());
        }
        let outcome = archive.store_batch(&fresh).await?;
        anyhow::ensure!(
            outcome.inserted == fresh.len() as u64,
            "the archive stored {} of {} new messages",
            outcome.inserted,
            fresh.len()
        );
        let mut stored = Vec::with_capacity(fresh_lines.len());
        let keys: Vec<(String, [u8; 32])> = fresh_lines.iter().map(|(_, k, _)| k.clone()).collect();
        let now = archive.ids_with_fingerprints(&keys).await?;
        for (m, key, n) in fresh_lines {
            let id = *now[&key]
                .get(n - 1)
                .context("a stored message is not found by its fingerprint")?;
            self.ids.insert(m.id, id);
            stored.push((id, m));
        }
        // Ingest stored them open, unreplayed, without a note: only the others need more.
        let with_state: Vec<(i64, &ExportedMessage)> = stored
            .iter()
            .copied()
            .filter(|(_, m)| has_state(m))
            .collect();
        archive.restore(&with_state, false).await?;
        self.imported.stored += stored.len() as u64;
        Ok(())
    }
}

/// Whether `m` has more to restore than ingest stores: a status, a note, replays.
fn has_state(m: &ExportedMessage) -> bool {
    m.status != MessageStatus::Archived
        || m.status_note.is_some()
        || m.redelivered
        || !m.replays.is_empty()
}

/// The delivery an exported message was: stored as new (`redelivered` would make ingest look
/// for copies itself; the flag is restored afterwards).
fn incoming(m: &ExportedMessage) -> IncomingMessage {
    IncomingMessage {
        vhost: m.vhost.clone(),
        queue: m.queue.clone(),
        exchange: m.exchange.clone(),
        routing_key: m.routing_key.clone(),
        redelivered: false,
        properties: m.properties.clone(),
        headers: m.headers.clone(),
        body: m.body.clone(),
        received_at: m.archived_at,
        decode_problems: Vec::new(),
        stream_offset: None,
    }
}

pub async fn run(config: ImportConfig) -> anyhow::Result<()> {
    let home_vhost = crate::amqp::dlq::home_vhost(&config.connection.amqp_url);
    let rules = config.ingest.rules();
    let url = &config.connection.database_url;
    let archive = archive::open(url)
        .await
        .with_context(|| format!("opening the archive {}", redact_url(url)))?;
    let imported = match config.input.as_deref() {
        Some(path) if path != std::path::Path::new("-") => {
            let file =
                std::fs::File::open(path).with_context(|| format!("opening {}", path.display()))?;
            let mut input = std::io::BufReader::new(file);
            import(archive.as_ref(), &mut input, &home_vhost, &rules).await?
        }
        _ => {
            let mut input = std::io::stdin().lock();
            import(archive.as_ref(), &mut input, &home_vhost, &rules).await?
        }
    };
    eprintln!(
        "imported {} messages; {} were in the archive already",
        crate::web::messages::thousands(imported.stored),
        crate::web::messages::thousands(imported.present)
    );
    Ok(())
}
