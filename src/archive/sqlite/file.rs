//! The SQLite archive's files — the database and its WAL and shared-memory index — are
//! readable by their owner only: they hold every message body. A file made earlier with
//! wider permissions is narrowed when the archive is opened.

use std::path::{Path, PathBuf};

/// The database file and the two SQLite keeps beside it in WAL mode.
fn files(database: &Path) -> [PathBuf; 3] {
    let with = |suffix: &str| {
        let mut name = database.as_os_str().to_owned();
        name.push(suffix);
        PathBuf::from(name)
    };
    [database.to_path_buf(), with("-wal"), with("-shm")]
}

/// Creates the database file owner-only when it is missing, and narrows the permissions of
/// those that exist. SQLite gives the WAL and index it creates the database file's mode.
#[cfg(unix)]
pub fn make_private(database: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(database)
    {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(e),
    }
    for file in files(database) {
        match std::fs::metadata(&file) {
            Ok(meta) if meta.permissions().mode() & 0o077 != 0 => {
                // Someone else's file (opened read-only, say) stays as it is, and says so.
                if let Err(e) =
                    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600))
                {
                    tracing::warn!(file = %file.display(), error = %e, "cannot make the archive file readable by its owner only");
                }
            }
            _ => {}
        }
    }
    Ok(())
}

#[cfg(not(unix))]
pub fn make_private(_database: &Path) -> std::io::Result<()> {
    Ok(())
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn files_are_made_and_narrowed_to_their_owner() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("a.db");
        make_private(&db).unwrap();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&db), 0o600);
        let wal = dir.path().join("a.db-wal");
        std::fs::write(&wal, b"").unwrap();
        std::fs::set_permissions(&wal, std::fs::Permissions::from_mode(0o644)).unwrap();
        std::fs::set_permissions(&db, std::fs::Permissions::from_mode(0o664)).unwrap();
        make_private(&db).unwrap();
        assert_eq!((mode(&db), mode(&wal)), (0o600, 0o600));
    }
}
