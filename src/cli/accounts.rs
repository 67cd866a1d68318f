//! `lazarus user …` and `lazarus token …`: managing who may sign in and the API tokens of
//! automation, directly in the archive database (whoever runs them holds its credentials).

use std::io::BufRead;
use std::sync::Arc;

use anyhow::Context;
use clap::Subcommand;

use super::replay::cli_actor;
use crate::archive::{self, Archive};
use crate::archive::{Grant, Grants, Role, TokenSpec};
use crate::auth::{
    check_name, check_password, hash_password, new_secret, secret_hash, MAX_TOKEN_DAYS,
    TOKEN_PREFIX,
};
use crate::config::ConnectionArgs;
use crate::support::secret_url::redact_url;

#[derive(Debug, Clone, Subcommand)]
pub enum UserCommand {
    /// Add a user (or change their role). The password is read from LAZARUS_PASSWORD or
    /// the first line of standard input; --no-password for users of the trusted proxy.
    Add {
        name: String,
        #[arg(long, default_value = "viewer")]
        role: Role,
        /// The role only on the DLQs this pattern names (repeatable; none: every DLQ):
        /// NAME in the AMQP URL's vhost or VHOST/NAME, `*` for any run of characters
        /// (`tenant-a/*`, `billing.*`). Not for admins.
        #[arg(long, value_parser = check_on)]
        on: Vec<String>,
        #[arg(long)]
        no_password: bool,
        #[command(flatten)]
        connection: ConnectionArgs,
    },
    /// Set a new password (read like `add`'s); ends the user's sessions.
    Passwd {
        name: String,
        #[command(flatten)]
        connection: ConnectionArgs,
    },
    /// Remove a user and end their sessions.
    Remove {
        name: String,
        #[command(flatten)]
        connection: ConnectionArgs,
    },
    /// List the users and their roles.
    List {
        #[command(flatten)]
        connection: ConnectionArgs,
    },
}

#[derive(Debug, Clone, Subcommand)]
pub enum TokenCommand {
    /// Create an API token and print it (only its hash is kept).
    Create {
        /// What uses it, e.g. ci-replay.
        name: String,
        #[arg(long, default_value = "viewer")]
        role: Role,
        /// The role only on the DLQs this pattern names (repeatable, as `lazarus user add
        /// --on`; none: every DLQ).
        #[arg(long, value_parser = check_on)]
        on: Vec<String>,
        /// It stops working this many days from now (1 to 366).
        #[arg(long, default_value_t = crate::auth::TOKEN_DAYS)]
        expires_in_days: u32,
        #[command(flatten)]
        connection: ConnectionArgs,
    },
    /// Revoke a token by its id.
    Revoke {
        id: i64,
        #[command(flatten)]
        connection: ConnectionArgs,
    },
    /// List the tokens (never their secrets).
    List {
        #[command(flatten)]
        connection: ConnectionArgs,
    },
}

async fn open(connection: &ConnectionArgs) -> anyhow::Result<Arc<dyn Archive>> {
    let url = &connection.database_url;
    archive::open(url)
        .await
        .with_context(|| format!("opening the archive {}", redact_url(url)))
}

fn check_on(pattern: &str) -> Result<String, String> {
    crate::message::dlq::check_pattern(pattern).map(|()| pattern.to_owned())
}

/// The password from LAZARUS_PASSWORD, or the first line of standard input.
fn read_password() -> anyhow::Result<String> {
    if let Ok(password) = std::env::var("LAZARUS_PASSWORD") {
        return Ok(password);
    }
    eprintln!("Password (one line on standard input):");
    let mut line = String::new();
    std::io::stdin()
        .lock()
        .read_line(&mut line)
        .context("reading the password from standard input")?;
    Ok(line.trim_end_matches(['\r', '\n']).to_owned())
}

/// The password's hash, once it passes the rules for `user`.
fn hash(password: &str, user: &str) -> anyhow::Result<String> {
    check_password(password, user).map_err(anyhow::Error::msg)?;
    hash_password(password).map_err(anyhow::Error::msg)
}

pub async fn user(command: UserCommand) -> anyhow::Result<()> {
    match command {
        UserCommand::Add {
            name,
            role,
            on,
            no_password,
            connection,
        } => {
            let grant = Grant::on_each(role, &on).map_err(anyhow::Error::msg)?;
            check_name(name.trim()).map_err(anyhow::Error::msg)?;
            let password_hash = if no_password {
                None
            } else {
                Some(hash(&read_password()?, name.trim())?)
            };
            open(&connection)
                .await?
                .put_user(
                    name.trim(),
                    password_hash.as_deref(),
                    role,
                    &grant,
                    &cli_actor(),
                )
                .await?;
            println!(
                "user {} is {}",
                name.trim(),
                Grants::of(role, &grant).describe()
            );
        }
        UserCommand::Passwd { name, connection } => {
            let password_hash = hash(&read_password()?, &name)?;
            let changed = open(&connection)
                .await?
                .set_password(&name, &password_hash, &cli_actor())
                .await?;
            anyhow::ensure!(changed, "no user {name:?}");
            println!("password of {name} changed; their sessions ended");
        }
        UserCommand::Remove { name, connection } => {
            let removed = open(&connection)
                .await?
                .remove_user(&name, &cli_actor())
                .await?;
            anyhow::ensure!(removed, "no user {name:?}");
            println!("user {name} removed; their sessions ended and their API tokens revoked");
        }
        UserCommand::List { connection } => {
            for u in open(&connection).await?.users().await? {
                let with = if u.password_hash.is_some() {
                    "password"
                } else {
                    "proxy"
                };
                println!("{}\t{}\t{with}", u.name, u.grants().describe());
            }
        }
    }
    Ok(())
}

pub async fn token(command: TokenCommand) -> anyhow::Result<()> {
    match command {
        TokenCommand::Create {
            name,
            role,
            on,
            expires_in_days,
            connection,
        } => {
            let grant = Grant::on_each(role, &on).map_err(anyhow::Error::msg)?;
            anyhow::ensure!(
                (1..=MAX_TOKEN_DAYS).contains(&expires_in_days),
                "--expires-in-days is 1 to {MAX_TOKEN_DAYS}"
            );
            let token = format!("{TOKEN_PREFIX}{}", new_secret());
            let expires_at =
                time::OffsetDateTime::now_utc() + time::Duration::days(expires_in_days.into());
            let hash = secret_hash(&token);
            let spec = TokenSpec {
                name: &name,
                token_hash: &hash,
                role,
                grants: &grant,
                owner: None,
                expires_at,
            };
            let id = open(&connection)
                .await?
                .create_token(&spec, &cli_actor())
                .await?;
            eprintln!(
                "token {id} ({name}, {}, expires {}); it is not shown again:",
                Grants::of(role, &grant).describe(),
                crate::support::format::utc(expires_at)
            );
            println!("{token}");
        }
        TokenCommand::Revoke { id, connection } => {
            let revoked = open(&connection)
                .await?
                .revoke_token(id, &cli_actor())
                .await?;
            anyhow::ensure!(revoked, "no active token {id}");
            println!("token {id} revoked");
        }
        TokenCommand::List { connection } => {
            let now = time::OffsetDateTime::now_utc();
            for t in open(&connection).await?.tokens().await? {
                let state = match (t.revoked, t.expired(now)) {
                    (true, _) => "revoked",
                    (false, true) => "expired",
                    (false, false) => "active",
                };
                let expires = t
                    .expires_at
                    .map(crate::support::format::utc)
                    .unwrap_or_default();
                println!(
                    "{}\t{}\t{}\t{state}\texpires {expires}",
                    t.id,
                    t.name,
                    t.grants().describe()
                );
            }
        }
    }
    Ok(())
}
