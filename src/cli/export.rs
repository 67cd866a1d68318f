//! `lazarus export`: the selected messages whole, as NDJSON (one [`ExportedMessage`] a line),
//! to standard output or a file only its owner may read, a batch at a time.

use std::io::Write;

use anyhow::Context;
use clap::Args;

use crate::archive::selection::ListParams;
use crate::archive::BusinessField;
use crate::archive::{self, Archive, ExportLine, Selection, EXPORT_BATCH, EXPORT_BATCH_BYTES};
use crate::config::ConnectionArgs;
use crate::support::secret_url::redact_url;

#[derive(Debug, Clone, Args)]
pub struct ExportConfig {
    #[command(flatten)]
    pub connection: ConnectionArgs,
    #[command(flatten)]
    pub filter: ListParams,
    /// Export these archive ids instead of a filter (repeatable).
    #[arg(long = "id")]
    pub ids: Vec<i64>,
    /// Business fields the search may use, as with `serve` (name=/json/pointer).
    #[arg(long = "field", env = "LAZARUS_FIELD", value_delimiter = ',')]
    pub fields: Vec<BusinessField>,
    /// Write here (created readable by its owner only) instead of standard output.
    #[arg(long, short)]
    pub output: Option<std::path::PathBuf>,
}

/// Writes the export to `out`; how many messages and body bytes. A body over a MiB is read
/// and written a piece at a time ([`ExportLine`]).
pub async fn write(
    archive: &dyn Archive,
    selection: &Selection,
    brokers: &crate::message::brokers::Brokers,
    out: &mut dyn Write,
) -> anyhow::Result<(u64, u64)> {
    let (mut after, mut messages, mut bytes) = (0, 0u64, 0u64);
    loop {
        let batch = archive
            .export_batch(selection, after, EXPORT_BATCH, EXPORT_BATCH_BYTES)
            .await?;
        let Some(last) = batch.last() else {
            break;
        };
        after = last.id;
        for m in batch {
            bytes += m.unread_body.map_or(m.body.len() as u64, |b| b.size);
            let mut line = ExportLine::new(&mut m.portable(brokers));
            while let Some(piece) = line.next(archive).await? {
                out.write_all(&piece)?;
            }
            messages += 1;
        }
    }
    out.flush()?;
    Ok((messages, bytes))
}

/// The file to write: created (or emptied) readable by its owner only.
fn create_private(path: &std::path::Path) -> std::io::Result<std::fs::File> {
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    options.open(path)
}

pub async fn run(config: ExportConfig) -> anyhow::Result<()> {
    let home_vhost = crate::message::dlq::home_vhost(&config.connection.amqp_url);
    let brokers = config
        .connection
        .brokers()
        .map_err(anyhow::Error::msg)
        .context("--broker")?;
    let filter = config.filter.filters_only();
    let selection = match (config.ids.is_empty(), filter == ListParams::default()) {
        (false, true) => Selection::Ids(config.ids.clone()),
        (false, false) => anyhow::bail!("give either --id or filters, not both"),
        (true, _) => {
            let fields: Vec<String> = config.fields.iter().map(|f| f.name.clone()).collect();
            let (filter, _) = filter
                .parse(&fields, &home_vhost)
                .map_err(|e| anyhow::anyhow!("{e}"))?;
            Selection::Filter(Box::new(filter))
        }
    };
    let url = &config.connection.database_url;
    let archive = archive::open(url)
        .await
        .with_context(|| format!("opening the archive {}", redact_url(url)))?;
    let (messages, bytes) = match &config.output {
        Some(path) => {
            let file =
                create_private(path).with_context(|| format!("creating {}", path.display()))?;
            let mut out = std::io::BufWriter::new(file);
            write(archive.as_ref(), &selection, &brokers, &mut out).await?
        }
        None => {
            let mut out = std::io::BufWriter::new(std::io::stdout().lock());
            write(archive.as_ref(), &selection, &brokers, &mut out).await?
        }
    };
    eprintln!(
        "exported {} messages ({})",
        crate::support::format::thousands(messages),
        crate::support::format::human_bytes(bytes as i64)
    );
    Ok(())
}
