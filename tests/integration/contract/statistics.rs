//! The planner's statistics after a burst of appends (PostgreSQL): the tables the pages read
//! are analyzed once they changed by more rows than they held, so that lists are planned for
//! what the archive holds (this machine's PostgreSQL runs without autovacuum, as some do).

use std::time::Duration;

use lazarus::archive::Numbering;

use super::*;

on_both_backends!(a_burst_of_appends_leaves_the_planner_statistics_current);
async fn a_burst_of_appends_leaves_the_planner_statistics_current() {
    let dir = tempfile::tempdir().unwrap();
    let url = archive_url(dir.path()).await;
    let archive = lazarus::archive::open(&url).await.unwrap();
    assert_eq!(
        archive.refresh_statistics().await.unwrap(),
        Vec::<String>::new(),
        "a new archive: nothing stale"
    );
    if Backend::current() == Backend::Postgres {
        // Whatever the server's settings, autovacuum does not analyze them first.
        for table in ["messages", "message_status", "message_search"] {
            execute_sql(
                &url,
                &format!("ALTER TABLE {table} SET (autovacuum_enabled = false)"),
            )
            .await;
        }
    }
    for batch in 0..4 {
        let prepared: Vec<PreparedMessage> = (0..500)
            .map(|i| {
                let name = format!("stat{batch}-{i}");
                PreparedMessage::new(delivery("stats.dlq", &name, Some(REJECTED)))
            })
            .collect();
        let stored = archive
            .append_numbered(&prepared, &mut Numbering::default())
            .await
            .unwrap();
        assert_eq!(stored.inserted, 500);
    }
    let rules = lazarus::archive::IngestRules::default();
    while archive.index_batch(&rules, 1_000).await.unwrap() > 0 {}
    let messages_analyzed =
        "SELECT CAST(reltuples AS BIGINT) FROM pg_class WHERE relname = 'messages'";
    match Backend::current() {
        Backend::Sqlite => assert_eq!(
            archive.refresh_statistics().await.unwrap(),
            Vec::<String>::new(),
            "SQLite's plans need none"
        ),
        Backend::Postgres => {
            assert!(
                count_rows(&url, messages_analyzed).await <= 0,
                "not analyzed since it was empty"
            );
            // The server counts changed rows within seconds of their commits.
            let changed = "SELECT n_mod_since_analyze FROM pg_stat_user_tables \
                           WHERE relname = 'messages'";
            wait_until(
                "the server to count the appended rows",
                Duration::from_secs(30),
                async || count_rows(&url, changed).await >= 2_000,
            )
            .await;
            let analyzed = archive.refresh_statistics().await.unwrap();
            for table in ["message_search", "message_status", "messages"] {
                assert!(
                    analyzed.iter().any(|t| t == table),
                    "{table} analyzed: {analyzed:?}"
                );
            }
            assert_eq!(count_rows(&url, messages_analyzed).await, 2_000);
        }
    }
}
