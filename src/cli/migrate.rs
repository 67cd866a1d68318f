//! `lazarus migrate --from URL --to URL`: every archived message of one archive into another
//! (SQLite into PostgreSQL, or back), through what `lazarus import` does, with progress; then
//! its users, API tokens, replay jobs and audit log (pointing at messages and jobs by their new
//! ids). Run again after an interruption, it adds only what is missing. At the end it checks
//! that both archives hold the same: the messages and body bytes of every DLQ, a checksum of
//! every message's content and state (the source's from the batches it copied, the target's
//! read back), and that carrying the rest again would add nothing.

use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Args;
use sha2::{Digest, Sha256};

use super::import::Importer;
use crate::archive::selection::ListParams;
use crate::archive::{
    self, read_unread_body, Actor, Archive, ArchiveError, AuditRow, ExportLine, ExportedMessage,
    MessageStore, QueueTotals, Selection, EXPORT_BATCH, EXPORT_BATCH_BYTES,
};
use crate::config::IngestArgs;
use crate::support::format::thousands;
use crate::support::secret_url::redact_url;
use crate::support::secret_url::SecretUrl;

#[derive(Debug, Clone, Args)]
pub struct MigrateConfig {
    /// The archive to read (it is not changed): sqlite://path or postgres://…
    #[arg(long, hide_env_values = true)]
    pub from: SecretUrl,
    /// The archive to fill (created when missing).
    #[arg(long, hide_env_values = true)]
    pub to: SecretUrl,
    #[command(flatten)]
    pub ingest: IngestArgs,
}

/// Every message.
fn everything() -> Selection {
    let (filter, _) = ListParams::default()
        .parse(&[], "")
        .expect("no filter is a valid filter");
    Selection::Filter(Box::new(filter))
}

async fn open(url: &str) -> anyhow::Result<std::sync::Arc<dyn Archive>> {
    archive::open(url)
        .await
        .with_context(|| format!("opening the archive {}", redact_url(url)))
}

/// A SHA-256 over messages in archive order (each canonical line with its length), and how
/// many.
#[derive(Default)]
struct Checksum {
    hash: Sha256,
    n: u64,
}

impl Checksum {
    /// Adds a message as both archives must hold it: its export line with everything but the
    /// ids, which differ (a copy keeps only that it is one). A body the export left in
    /// `archive` is read a piece at a time, as the line is hashed.
    async fn add(
        &mut self,
        m: &mut ExportedMessage,
        archive: &dyn MessageStore,
    ) -> Result<(), ArchiveError> {
        let (id, replay_of) = (m.id, m.replay_of);
        m.id = 0;
        m.replay_of = m.replay_of.map(|_| 0);
        let mut line = ExportLine::new(m);
        (m.id, m.replay_of) = (id, replay_of);
        self.hash.update(line.len().to_be_bytes());
        while let Some(piece) = line.next(archive).await? {
            self.hash.update(&piece);
        }
        self.n += 1;
        Ok(())
    }

    fn finish(self) -> (String, u64) {
        let hex = self
            .hash
            .finalize()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        (hex, self.n)
    }
}

/// The checksum of every message of `archive`, in archive order; how many.
async fn checksum(archive: &dyn Archive) -> anyhow::Result<(String, u64)> {
    let selection = everything();
    let (mut sum, mut after) = (Checksum::default(), 0);
    loop {
        let mut batch = archive
            .export_batch(&selection, after, EXPORT_BATCH, EXPORT_BATCH_BYTES)
            .await?;
        let Some(last) = batch.last() else {
            break;
        };
        after = last.id;
        for m in &mut batch {
            sum.add(m, archive).await?;
        }
    }
    Ok(sum.finish())
}

/// DLQs whose messages or body bytes differ between the two: what each holds.
fn differences(from: &[QueueTotals], to: &[QueueTotals]) -> Vec<String> {
    let key = |t: &QueueTotals| (t.queue.clone(), t.messages, t.bytes);
    let (a, b): (Vec<_>, Vec<_>) = (from.iter().map(key).collect(), to.iter().map(key).collect());
    let mut out = Vec::new();
    for (queue, messages, bytes) in &a {
        if !b.contains(&(queue.clone(), *messages, *bytes)) {
            out.push(format!(
                "{queue}: {messages} messages ({bytes} bytes) in the source"
            ));
        }
    }
    for (queue, messages, bytes) in &b {
        if !a.contains(&(queue.clone(), *messages, *bytes)) {
            out.push(format!(
                "{queue}: {messages} messages ({bytes} bytes) in the target"
            ));
        }
    }
    out
}

pub async fn run(config: MigrateConfig) -> anyhow::Result<()> {
    anyhow::ensure!(
        config.from != config.to,
        "--from and --to name the same archive"
    );
    let from = open(&config.from).await?;
    let to = open(&config.to).await?;
    let rules = config.ingest.rules();
    let total: i64 = from.queue_totals().await?.iter().map(|t| t.messages).sum();
    eprintln!(
        "migrating {} messages from {} to {}",
        thousands(total.max(0) as u64),
        redact_url(&config.from),
        redact_url(&config.to)
    );
    let (selection, mut importer) = (everything(), Importer::default());
    let (mut after, mut done, mut said) = (0, 0u64, Instant::now());
    // The source's checksum, taken from the batches copied (not read a second time).
    let mut source = Checksum::default();
    loop {
        let mut batch = from
            .export_batch(&selection, after, EXPORT_BATCH, EXPORT_BATCH_BYTES)
            .await?;
        let Some(last) = batch.last() else {
            break;
        };
        after = last.id;
        for m in &mut batch {
            source.add(m, from.as_ref()).await?;
        }
        // A body the export left in the source is read whole to be stored (ingest holds a
        // body whole, as a delivery), one such message at a time.
        for run in batch.chunk_by_mut(|a, b| a.unread_body.is_none() && b.unread_body.is_none()) {
            for m in run.iter_mut() {
                read_unread_body(from.as_ref(), m).await?;
            }
            importer.store(to.as_ref(), run, &rules).await?;
        }
        done += batch.len() as u64;
        if said.elapsed() >= Duration::from_secs(2) {
            let imported = importer.imported();
            eprintln!(
                "{} of {} messages ({} copied, {} there already)",
                thousands(done),
                thousands(total.max(0) as u64),
                thousands(imported.stored),
                thousands(imported.present)
            );
            said = Instant::now();
        }
    }
    let imported = importer.imported();
    eprintln!(
        "copied {} messages; {} were there already",
        thousands(imported.stored),
        thousands(imported.present)
    );
    let carried = carry(from.as_ref(), to.as_ref(), &importer).await?;
    eprintln!("carried {carried} (the rest were there already); checking");
    let differ = differences(&from.queue_totals().await?, &to.queue_totals().await?);
    anyhow::ensure!(
        differ.is_empty(),
        "the archives differ: {}",
        differ.join("; ")
    );
    let (a, n) = source.finish();
    let (b, m) = checksum(to.as_ref()).await?;
    anyhow::ensure!(
        a == b,
        "the archives differ: {n} messages with checksum {a} in the source, {m} with {b} in the target"
    );
    let again = carry(from.as_ref(), to.as_ref(), &importer).await?;
    anyhow::ensure!(
        again == Carried::default(),
        "carrying the accounts, jobs and audit log again would add {again}"
    );
    to.record(
        &Actor::system("migrate"),
        "migrate",
        &format!(
            "migrated from {}: {} messages copied ({} there already), {carried}",
            redact_url(&config.from),
            imported.stored,
            imported.present
        ),
    )
    .await?;
    println!(
        "verified: both archives hold the same {n} messages (sha256 {a}), users, API tokens, \
         replay jobs and audit log"
    );
    Ok(())
}

/// What [`carry`] added.
#[derive(Debug, Default, PartialEq, Eq)]
struct Carried {
    users: u64,
    tokens: u64,
    jobs: u64,
    /// Items of the jobs added whose message the source no longer had (none expected).
    items_without_message: u64,
    audit: u64,
}

impl std::fmt::Display for Carried {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let n = |n: u64, one: &str, many: &str| match n {
            1 => format!("1 {one}"),
            n => format!("{} {many}", thousands(n)),
        };
        write!(
            f,
            "{}, {}, {} and {}",
            n(self.users, "user", "users"),
            n(self.tokens, "API token", "API tokens"),
            n(self.jobs, "replay job", "replay jobs"),
            n(self.audit, "audit entry", "audit entries")
        )?;
        if self.items_without_message > 0 {
            write!(
                f,
                " ({} job items left out: their message is gone)",
                self.items_without_message
            )?;
        }
        Ok(())
    }
}

/// Carries the users, API tokens, replay jobs and audit log of `from` into `to`, messages and
/// jobs named by their ids in `to`.
async fn carry(
    from: &dyn Archive,
    to: &dyn Archive,
    importer: &Importer,
) -> anyhow::Result<Carried> {
    let mut carried = Carried::default();
    (carried.users, carried.tokens) = to
        .carry_accounts(&from.users().await?, &from.token_rows().await?)
        .await?;
    let mut jobs = std::collections::HashMap::new();
    for job in from.job_rows().await? {
        let mut items = from.item_rows(job.id).await?;
        let before = items.len();
        items.retain_mut(|item| match importer.id_of(item.message_id) {
            Some(id) => {
                item.message_id = id;
                true
            }
            None => false,
        });
        let (id, added) = to.carry_job(&job, &items).await?;
        if added {
            carried.jobs += 1;
            carried.items_without_message += (before - items.len()) as u64;
        }
        jobs.insert(job.id, id);
    }
    let entries: Vec<AuditRow> = from
        .all_audit_rows()
        .await?
        .into_iter()
        .map(|e| AuditRow {
            message_id: e.message_id.and_then(|id| importer.id_of(id)),
            job_id: e.job_id.and_then(|id| jobs.get(&id).copied()),
            ..e
        })
        .collect();
    carried.audit = to.carry_audit(&entries).await?;
    Ok(carried)
}
