//! `lazarus import`: reads what `lazarus export` wrote back into an archive, a batch at a
//! time, through ingest (search, totals, groups and fields are derived as for a delivery),
//! then gives each stored message its exported status, note, times and replays. Idempotent:
//! the n-th line with a given queue and fingerprint is stored only while the archive holds
//! fewer than n such messages, so importing twice adds nothing. A line is held to what ingest
//! could have archived ([`admit`]) and to [`MAX_LINE_BYTES`]: one that is not is refused —
//! said with its number and why — and the import goes on with the others.

use std::collections::HashMap;
use std::io::BufRead;

use anyhow::Context;
use clap::Args;

use crate::archive::{
    self, admit, Archive, ExportedMessage, IncomingMessage, IngestRules, MessageStatus,
    PreparedMessage,
};
use crate::config::{ConnectionArgs, IngestArgs};
use crate::message::brokers::Brokers;
use crate::support::secret_url::redact_url;

#[derive(Debug, Clone, Args)]
pub struct ImportConfig {
    #[command(flatten)]
    pub connection: ConnectionArgs,
    /// The export to read (`-` or none: standard input).
    pub input: Option<std::path::PathBuf>,
    #[command(flatten)]
    pub ingest: IngestArgs,
}

/// Lines read at a time, at most…
const BATCH: usize = 500;
/// …and body bytes.
const BATCH_BYTES: usize = 8 * 1024 * 1024;
/// The longest line read: a body of [`admit::MAX_BODY_BYTES`] in base64 (171 MiB) and 21 MiB
/// for the rest. A longer one is read through without being kept.
pub const MAX_LINE_BYTES: usize = 192 << 20;
/// Refused lines said one by one; past them, only counted.
const REFUSALS_SAID: u64 = 100;

/// What an import did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Imported {
    pub stored: u64,
    /// Already in the archive (an earlier import, or the archive it was exported from).
    pub present: u64,
    /// Lines refused (said as they were met).
    pub refused: u64,
}

/// Reads the whole export from `input` into `archive`, telling `refused` the number of each
/// line it refuses and why.
pub async fn import(
    archive: &dyn Archive,
    input: &mut dyn BufRead,
    brokers: &Brokers,
    rules: &IngestRules,
    refused: &mut dyn FnMut(usize, &str),
) -> anyhow::Result<Imported> {
    let mut state = Importer::default();
    let (mut batch, mut bytes, mut number) = (Vec::new(), 0, 0usize);
    let mut line = Vec::new();
    loop {
        let read = read_line(input, &mut line, MAX_LINE_BYTES).context("reading the export")?;
        let end = read == Line::End;
        if !end {
            number += 1;
        }
        let parsed = match read {
            Line::End => None,
            Line::TooLong(length) => Some(Err(format!(
                "{length} bytes long; a line holds at most {MAX_LINE_BYTES}"
            ))),
            Line::Read if line.trim_ascii().is_empty() => None,
            Line::Read => Some(parse(&line, brokers)),
        };
        if line.capacity() > BATCH_BYTES {
            // A long line's buffer is not kept beside what it became.
            line = Vec::new();
        }
        match parsed {
            Some(Ok(m)) => {
                bytes += m.body.len();
                batch.push(m);
            }
            Some(Err(why)) => {
                state.imported.refused += 1;
                refused(number, &why);
            }
            None => {}
        }
        if !batch.is_empty() && (end || batch.len() >= BATCH || bytes >= BATCH_BYTES) {
            state.store(archive, &mut batch, rules).await?;
            batch.clear();
            bytes = 0;
        }
        if end {
            return Ok(state.imported());
        }
    }
}

/// An exported line as this archive would store it, or why it is refused.
fn parse(line: &[u8], brokers: &Brokers) -> Result<ExportedMessage, String> {
    let m: ExportedMessage =
        serde_json::from_slice(line).map_err(|e| format!("not an exported message ({e})"))?;
    if !m.vhost.is_empty() {
        crate::message::dlq::check_name("vhost", &m.vhost)?;
    }
    crate::message::dlq::check_name("queue", &m.queue)?;
    crate::message::dlq::check_broker_name(&m.broker)?;
    let m = m.stored(brokers);
    admit::check_body("body", m.body.len())?;
    for r in &m.replays {
        if let Some(body) = &r.edited_body {
            admit::check_body("a replay's edited body", body.len())?;
        }
    }
    // The rest as ingest's own check, on the message without its body (not copied for it).
    admit::check(&incoming_without_body(&m))?;
    Ok(m)
}

/// What [`read_line`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Line {
    /// A line, in the buffer (without its line feed).
    Read,
    /// A line of this many bytes, longer than allowed: read through, not kept.
    TooLong(u64),
    /// The end of the input.
    End,
}

/// Reads one line of `input` into `line` (cleared first), keeping at most `max` bytes of it.
fn read_line(input: &mut dyn BufRead, line: &mut Vec<u8>, max: usize) -> std::io::Result<Line> {
    line.clear();
    let (mut length, mut any) = (0u64, false);
    loop {
        let buf = match input.fill_buf() {
            Ok(buf) => buf,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if buf.is_empty() {
            break;
        }
        any = true;
        let newline = buf.iter().position(|b| *b == b'\n');
        let part = &buf[..newline.unwrap_or(buf.len())];
        length += part.len() as u64;
        if length <= max as u64 {
            line.extend_from_slice(part);
        } else if line.capacity() > 0 {
            *line = Vec::new();
        }
        let used = newline.map_or(buf.len(), |i| i + 1);
        input.consume(used);
        if newline.is_some() {
            break;
        }
    }
    Ok(match (any, length > max as u64) {
        (false, _) => Line::End,
        (true, true) => Line::TooLong(length),
        (true, false) => Line::Read,
    })
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

    /// Stores what of `batch` the archive does not hold yet, in order. Their bodies are
    /// moved into the archive's form, not copied: `batch` keeps none.
    pub async fn store(
        &mut self,
        archive: &dyn Archive,
        batch: &mut [ExportedMessage],
        rules: &IngestRules,
    ) -> anyhow::Result<()> {
        // A replayed copy of a message of the same batch: the original is stored first, so
        // that the copy can point at its new id.
        let mut starts = vec![0];
        for (i, m) in batch.iter().enumerate() {
            let start = *starts.last().expect("one at least");
            if m.replay_of
                .is_some_and(|of| batch[start..i].iter().any(|b| b.id == of))
            {
                starts.push(i);
            }
        }
        starts.push(batch.len());
        for part in starts.windows(2) {
            self.store_part(archive, &mut batch[part[0]..part[1]], rules)
                .await?;
        }
        Ok(())
    }

    async fn store_part(
        &mut self,
        archive: &dyn Archive,
        batch: &mut [ExportedMessage],
        rules: &IngestRules,
    ) -> anyhow::Result<()> {
        if batch.is_empty() {
            return Ok(());
        }
        // Each line with its place among the lines of its queue and fingerprint.
        let mut prepared = Vec::with_capacity(batch.len());
        for m in batch.iter_mut() {
            let mut p = PreparedMessage::with_rules(incoming(m), rules);
            p.replay_of = m.replay_of.and_then(|old| self.ids.get(&old).copied());
            let n = self
                .seen
                .entry((m.queue.clone(), p.fingerprint))
                .or_default();
            *n += 1;
            prepared.push((p, *n));
        }
        let batch: &[ExportedMessage] = batch;
        let keys: Vec<(String, [u8; 32], Option<i64>)> = prepared
            .iter()
            .map(|(p, _)| (p.message.queue.clone(), p.fingerprint, p.fingerprint_time))
            .collect();
        let archived = archive.ids_with_fingerprints(&keys).await?;
        let (mut fresh, mut fresh_lines, mut present) = (Vec::new(), Vec::new(), Vec::new());
        for (((p, n), m), key) in prepared.into_iter().zip(batch).zip(keys) {
            match archived[&(key.0.clone(), key.1)].get(n - 1) {
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
        let keys: Vec<(String, [u8; 32], Option<i64>)> =
            fresh_lines.iter().map(|(_, k, _)| k.clone()).collect();
        let now = archive.ids_with_fingerprints(&keys).await?;
        for (m, (queue, fingerprint, _), n) in fresh_lines {
            let id = *now[&(queue, fingerprint)]
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
fn incoming(m: &mut ExportedMessage) -> IncomingMessage {
    IncomingMessage {
        body: std::mem::take(&mut m.body),
        ..incoming_without_body(m)
    }
}

/// [`incoming`] with an empty body.
fn incoming_without_body(m: &ExportedMessage) -> IncomingMessage {
    IncomingMessage {
        broker: m.broker.clone(),
        vhost: m.vhost.clone(),
        queue: m.queue.clone(),
        exchange: m.exchange.clone(),
        routing_key: m.routing_key.clone(),
        redelivered: false,
        properties: m.properties.clone(),
        headers: m.headers.clone(),
        body: Vec::new(),
        received_at: m.archived_at,
        decode_problems: Vec::new(),
        stream_offset: None,
    }
}

pub async fn run(config: ImportConfig) -> anyhow::Result<()> {
    let home_vhost = crate::message::dlq::home_vhost(&config.connection.amqp_url);
    let brokers = config
        .connection
        .brokers()
        .map_err(anyhow::Error::msg)
        .context("--broker")?;
    let rules = archive::IngestRules {
        home_vhost: home_vhost.clone(),
        ..config.ingest.rules()
    };
    let url = &config.connection.database_url;
    let archive = archive::open(url)
        .await
        .with_context(|| format!("opening the archive {}", redact_url(url)))?;
    let mut said = 0u64;
    let mut refused = |number: usize, why: &str| {
        said += 1;
        if said <= REFUSALS_SAID {
            eprintln!("line {number} refused: {why}");
        }
    };
    let imported = match config.input.as_deref() {
        Some(path) if path != std::path::Path::new("-") => {
            let file =
                std::fs::File::open(path).with_context(|| format!("opening {}", path.display()))?;
            let mut input = std::io::BufReader::with_capacity(1 << 20, file);
            import(archive.as_ref(), &mut input, &brokers, &rules, &mut refused).await?
        }
        _ => {
            let mut input = std::io::stdin().lock();
            import(archive.as_ref(), &mut input, &brokers, &rules, &mut refused).await?
        }
    };
    if imported.refused > REFUSALS_SAID {
        eprintln!(
            "… and {} more lines refused",
            crate::support::format::thousands(imported.refused - REFUSALS_SAID)
        );
    }
    eprintln!(
        "imported {} messages; {} were in the archive already; {} lines refused",
        crate::support::format::thousands(imported.stored),
        crate::support::format::thousands(imported.present),
        crate::support::format::thousands(imported.refused)
    );
    anyhow::ensure!(
        imported.refused == 0,
        "{} lines were refused (said above): mend them and import the file again (what is \
         imported already is not imported twice)",
        imported.refused
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_longer_than_the_bound_are_read_through_not_kept() {
        let text = format!("short\n{}\n\nlast", "x".repeat(100));
        let mut input = std::io::BufReader::with_capacity(7, text.as_bytes());
        let mut line = Vec::new();
        let mut next = || {
            let read = read_line(&mut input, &mut line, 10).unwrap();
            (read, String::from_utf8(line.clone()).unwrap())
        };
        assert_eq!(next(), (Line::Read, "short".into()));
        let (read, kept) = next();
        assert_eq!(read, Line::TooLong(100));
        assert!(kept.is_empty());
        assert_eq!(next(), (Line::Read, String::new()));
        assert_eq!(next(), (Line::Read, "last".into()));
        assert_eq!(next(), (Line::End, String::new()));
    }
}
