//! The archive backend a test runs on (`on_both_backends!`), a fresh archive on it, and
//! counts read from outside the process that writes it.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

/// The archive backend a test runs on. A test declared with [`on_both_backends!`] runs
/// once on each, as `<name>::sqlite` and `<name>::postgres`; others run on SQLite.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

/// The backend of the running test, and the PostgreSQL databases it made.
#[derive(Clone)]
struct TestBackend {
    backend: Backend,
    databases: Arc<std::sync::Mutex<Vec<String>>>,
}

tokio::task_local! {
    static BACKEND: TestBackend;
}

impl Backend {
    pub fn current() -> Backend {
        BACKEND.try_with(|b| b.backend).unwrap_or(Backend::Sqlite)
    }

    /// Runs `test` with this backend as the current one; the databases it made are dropped
    /// when it passes (a failed test's are kept to look at, and dropped by a later run).
    pub async fn scope<F: std::future::Future>(self, test: F) -> F::Output {
        let scope = TestBackend {
            backend: self,
            databases: Default::default(),
        };
        let out = BACKEND.scope(scope.clone(), test).await;
        let databases = std::mem::take(&mut *scope.databases.lock().unwrap());
        if !databases.is_empty() {
            use sqlx::Connection;
            let mut admin = sqlx::PgConnection::connect(&postgres_admin_url())
                .await
                .unwrap();
            for name in databases {
                sqlx::query(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
                    .execute(&mut admin)
                    .await
                    .unwrap();
            }
        }
        out
    }
}

/// Declares the tests `<name>::sqlite` and `<name>::postgres`, each running the async fn
/// `<name>` with that backend current: one suite, parameterised by backend.
macro_rules! on_both_backends {
    ($name:ident) => {
        mod $name {
            #[tokio::test]
            async fn sqlite() {
                $crate::helpers::Backend::Sqlite.scope(super::$name()).await
            }

            #[tokio::test]
            async fn postgres() {
                $crate::helpers::Backend::Postgres
                    .scope(super::$name())
                    .await
            }
        }
    };
}
pub(crate) use on_both_backends;

/// The PostgreSQL server tests make their databases on (override with
/// `LAZARUS_TEST_POSTGRES_URL`; any database of it to connect to as admin).
pub fn postgres_admin_url() -> String {
    std::env::var("LAZARUS_TEST_POSTGRES_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into())
}

/// A new, empty archive for the current backend: a file in `dir`, or a PostgreSQL database
/// of its own (`lazarus_test_<pid>_<n>`, dropped when the test passes). Databases that test
/// processes which have ended left behind are dropped here.
pub async fn archive_url(dir: &std::path::Path) -> String {
    match Backend::current() {
        Backend::Sqlite => format!("sqlite://{}", dir.join("archive.db").display()),
        Backend::Postgres => {
            use sqlx::Connection;
            static N: AtomicU32 = AtomicU32::new(0);
            let admin = postgres_admin_url();
            let mut conn = sqlx::PgConnection::connect(&admin)
                .await
                .expect("PostgreSQL answers (LAZARUS_TEST_POSTGRES_URL)");
            let old: Vec<String> = sqlx::query_scalar(
                "SELECT datname FROM pg_database WHERE datname LIKE 'lazarus\\_test\\_%'",
            )
            .fetch_all(&mut conn)
            .await
            .unwrap();
            for name in old {
                let pid = name.split('_').nth(2).unwrap_or_default();
                if !std::path::Path::new(&format!("/proc/{pid}")).exists() {
                    let _ = sqlx::query(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
                        .execute(&mut conn)
                        .await;
                }
            }
            let name = format!(
                "lazarus_test_{}_{}",
                std::process::id(),
                N.fetch_add(1, Ordering::Relaxed)
            );
            sqlx::query(&format!("CREATE DATABASE {name}"))
                .execute(&mut conn)
                .await
                .unwrap();
            let _ = conn.close().await;
            let _ = BACKEND.try_with(|b| b.databases.lock().unwrap().push(name.clone()));
            let (base, _) = admin.rsplit_once('/').expect("a database URL");
            format!("{base}/{name}")
        }
    }
}

/// 0 while the tables do not exist yet; any other failure is the test's own mistake.
fn counted(n: Result<i64, sqlx::Error>) -> i64 {
    match n {
        Ok(n) => n,
        Err(sqlx::Error::Database(_)) => 0,
        Err(e) => panic!("count: {e}"),
    }
}

/// A count from an archive, read from outside the process that writes it (0 before the
/// archive or its tables exist).
pub async fn count_rows(database_url: &str, sql: &str) -> i64 {
    use sqlx::{ConnectOptions, Connection};
    if let Some(path) = database_url.strip_prefix("sqlite://") {
        let options = sqlx::sqlite::SqliteConnectOptions::new()
            .filename(path)
            .read_only(true);
        let Ok(mut conn) = options.connect().await else {
            return 0;
        };
        let n = sqlx::query_scalar(sql).fetch_one(&mut conn).await;
        let _ = conn.close().await;
        counted(n)
    } else {
        let Ok(mut conn) = sqlx::PgConnection::connect(database_url).await else {
            return 0;
        };
        let n = sqlx::query_scalar(sql).fetch_one(&mut conn).await;
        let _ = conn.close().await;
        counted(n)
    }
}

/// The version of the migration named `name` (`0035_totals_broker.sql`: `totals_broker`) for
/// the backend of `database_url`: found by its name, so renumbering it is a rename.
pub fn migration_version(database_url: &str, name: &str) -> u32 {
    let folder = match database_url.starts_with("sqlite://") {
        true => "sqlite",
        false => "postgres",
    };
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("migrations")
        .join(folder);
    let suffix = format!("_{name}.sql");
    std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .find_map(|file| file.strip_suffix(&suffix)?.parse().ok())
        .unwrap_or_else(|| panic!("no migration {name} for {folder}"))
}

/// Runs statements on an archive from outside the process that writes it: how a test makes
/// an archive as an earlier version left it.
pub async fn execute_sql(database_url: &str, sql: &str) {
    use sqlx::{Connection, Executor};
    if database_url.starts_with("sqlite://") {
        let mut conn = sqlx::SqliteConnection::connect(database_url).await.unwrap();
        conn.execute(sql).await.unwrap();
        let _ = conn.close().await;
    } else {
        let mut conn = sqlx::PgConnection::connect(database_url).await.unwrap();
        conn.execute(sql).await.unwrap();
        let _ = conn.close().await;
    }
}
