//! Command line and environment (`LAZARUS_*`): every setting, with secrets redacted in `Debug`.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use clap::Args;

use crate::amqp::consumer::BatchSettings;
use crate::archive::{BusinessField, IngestRules, Role};
use crate::auth::{AuthMode, AuthSettings};
use crate::message::structured::protobuf::Schemas;
use crate::replay::job::RunnerSettings;
use crate::support::secret_url::SecretUrl;

/// What ingest derives from a message it stores outside `serve` (an import, a migration):
/// the same flags and variables as `serve`'s.
#[derive(Debug, Clone, Args)]
pub struct IngestArgs {
    /// As `serve`'s: where failing consumers leave their error.
    #[arg(long = "error-header", env = "LAZARUS_ERROR_HEADER", value_delimiter = ',', default_values_t = crate::archive::DEFAULT_ERROR_HEADERS.map(String::from))]
    pub error_headers: Vec<String>,
    /// As `serve`'s.
    #[arg(long = "error-pointer", env = "LAZARUS_ERROR_POINTER", value_delimiter = ',', value_parser = crate::message::masking::check_pointer)]
    pub error_pointers: Vec<String>,
    /// As `serve`'s: business fields extracted from the bodies.
    #[arg(long = "field", env = "LAZARUS_FIELD", value_delimiter = ',')]
    pub fields: Vec<BusinessField>,
    /// As `serve`'s: values kept out of the search index.
    #[arg(long = "mask", env = "LAZARUS_MASK", value_delimiter = ',', value_parser = crate::message::masking::check_pointer)]
    pub masks: Vec<String>,
}

impl IngestArgs {
    pub fn rules(&self) -> IngestRules {
        IngestRules {
            error_headers: self.error_headers.clone(),
            error_pointers: self.error_pointers.clone(),
            fields: self.fields.clone(),
            masks: self.masks.clone(),
            schemas: None,
            // Archives and exports keep no home vhost's name: the default one's.
            home_vhost: "/".to_owned(),
        }
    }
}

/// `--discover`: archiving the DLQs the management API shows.
#[derive(Debug, Clone, Args)]
pub struct DiscoverArgs {
    /// Archive every dead-letter queue of the AMQP URL's vhost (of others too, with a
    /// --discover-include vhost/pattern) that the management API shows (needs
    /// --management-url; on each broker given one, its DLQs under its NAME: keys), besides
    /// those --queue names, and look for new ones every --discover-interval-secs. Retry and delay queues (a DLQ with a dead-letter exchange of
    /// its own) are left alone. Lazarus declares no queue.
    #[arg(long, env = "LAZARUS_DISCOVER")]
    pub discover: bool,
    #[command(flatten)]
    pub patterns: DiscoverPatterns,
    /// Seconds between two looks for new DLQs.
    #[arg(long, env = "LAZARUS_DISCOVER_INTERVAL_SECS", default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..))]
    pub discover_interval_secs: u64,
}

/// Which discovered DLQs `--discover` archives, by name.
#[derive(Debug, Clone, Default, Args)]
pub struct DiscoverPatterns {
    /// With --discover, archive only DLQs whose name matches one of these (`*`: any run of
    /// characters); a pattern with `/` matches vhost/name in any vhost (`*/*`: every DLQ of
    /// every vhost). Repeatable; in the variable separated by ','.
    #[arg(
        long = "discover-include",
        env = "LAZARUS_DISCOVER_INCLUDE",
        value_delimiter = ','
    )]
    pub include: Vec<String>,
    /// With --discover, never archive DLQs whose name matches one of these.
    #[arg(
        long = "discover-exclude",
        env = "LAZARUS_DISCOVER_EXCLUDE",
        value_delimiter = ','
    )]
    pub exclude: Vec<String>,
}

impl From<&DiscoverPatterns> for crate::amqp::adopt::Patterns {
    fn from(p: &DiscoverPatterns) -> Self {
        crate::amqp::adopt::Patterns {
            include: p.include.clone(),
            exclude: p.exclude.clone(),
        }
    }
}

/// What `serve` tells webhooks, and where (`Debug` shows each URL as scheme and host).
#[derive(Debug, Clone, Args)]
pub struct WebhookArgs {
    /// POST a JSON message (Slack's `{"text": ...}`, or for a Teams workflow URL an Adaptive
    /// Card; the details under `lazarus`) to URL when a failure group first appears, a DLQ
    /// passes a --webhook-threshold or is back under it, or a replay job completes, is
    /// cancelled or pauses. http:// or https://; repeatable, in the variable separated by ','.
    /// Retried with backoff; never holds up ingest. Shown in logs as scheme and host only.
    #[arg(
        long = "webhook",
        env = "LAZARUS_WEBHOOK",
        value_delimiter = ',',
        hide_env_values = true
    )]
    pub webhooks: Vec<crate::support::http::Target>,
    /// [QUEUE:]N: tell the webhooks when a DLQ (without QUEUE: each DLQ) holds more than N open
    /// messages, and when it is back at N or under. Repeatable; a queue's own replace the
    /// ones for every DLQ.
    #[arg(
        long = "webhook-threshold",
        env = "LAZARUS_WEBHOOK_THRESHOLD",
        value_delimiter = ','
    )]
    pub thresholds: Vec<crate::notify::ThresholdSpec>,
    /// Seconds between two looks at the archive for what to tell the webhooks.
    #[arg(long, env = "LAZARUS_WEBHOOK_INTERVAL_SECS", default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..))]
    pub webhook_interval_secs: u64,
    /// At most N POSTs to each webhook in any --webhook-max-posts-secs (retries included);
    /// beyond, new failure groups are told together in one digest that counts them all.
    #[arg(long, env = "LAZARUS_WEBHOOK_MAX_POSTS", default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..))]
    pub webhook_max_posts: u32,
    /// The window of --webhook-max-posts, in seconds.
    #[arg(long, env = "LAZARUS_WEBHOOK_MAX_POSTS_SECS", default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..))]
    pub webhook_max_posts_secs: u64,
    /// Where users reach this dashboard (https://lazarus.example.com): notifications link to
    /// the page of what they tell.
    #[arg(long, env = "LAZARUS_PUBLIC_URL")]
    pub public_url: Option<String>,
}

impl WebhookArgs {
    /// How fast each webhook may be told.
    pub fn rate(&self) -> crate::notify::Rate {
        crate::notify::Rate {
            posts: self.webhook_max_posts,
            per: std::time::Duration::from_secs(self.webhook_max_posts_secs),
        }
    }
}

/// The retention policy, the same for `serve` and `retention`.
#[derive(Debug, Clone, Args)]
pub struct RetentionArgs {
    /// What the archive keeps: `[QUEUE:]RULE[,RULE...]` with days=N (archived N days ago),
    /// resolved-days=N (resolved N days ago), messages=N and size=N[KiB|MiB|GiB|TiB] (the
    /// oldest beyond go). Without a queue for every DLQ; a queue's own replaces the rules it
    /// names. Repeatable; in the variable separated by ';'. Messages an unfinished replay job
    /// holds are kept. None: everything is kept.
    #[arg(long = "retention", env = "LAZARUS_RETENTION", value_delimiter = ';')]
    pub specs: Vec<crate::retention::RetentionSpec>,
    /// Seconds between two retention passes of `serve` (the first runs at start).
    #[arg(long, env = "LAZARUS_RETENTION_INTERVAL_SECS", default_value_t = 3600, value_parser = clap::value_parser!(u64).range(1..))]
    pub retention_interval_secs: u64,
}

impl RetentionArgs {
    /// The policy, its queues named as `--queue` names them from the AMQP URL `amqp_url`.
    pub fn policy(&self, amqp_url: &str) -> Result<crate::retention::Policy, String> {
        let home = crate::message::dlq::home_vhost(amqp_url);
        crate::retention::Policy::new(&self.specs, &home)
    }
}

/// Where the broker and the archive are (the same flags and variables as `serve`).
#[derive(Debug, Clone, Args)]
pub struct ConnectionArgs {
    /// RabbitMQ to consume from and replay to (amqp:// or amqps://); a cluster as every
    /// node's address, amqp://user:password@node1:5672,node2,node3/vhost: Lazarus connects
    /// to the first that answers and moves on when it dies.
    #[arg(
        long,
        env = "LAZARUS_AMQP_URL",
        default_value = "amqp://guest:guest@127.0.0.1:5672/%2f",
        hide_env_values = true
    )]
    pub amqp_url: SecretUrl,

    /// Another cluster to archive, NAME=AMQP_URL (repeatable; NAME of a-z, 0-9, - and _):
    /// its DLQs are `--queue NAME:name`, its messages keyed `NAME:…` and replayed back to it.
    /// `--amqp-url` is the broker named `default`.
    #[arg(
        long = "broker",
        env = "LAZARUS_BROKER",
        value_name = "NAME=AMQP_URL",
        value_delimiter = ' ',
        hide_env_values = true
    )]
    pub brokers: Vec<BrokerArg>,

    /// The archive: sqlite://path (created when missing) or postgres://user@host/database
    /// (shared by several instances).
    #[arg(
        long,
        env = "LAZARUS_DATABASE_URL",
        default_value = "sqlite://lazarus.db",
        hide_env_values = true
    )]
    pub database_url: SecretUrl,
}

impl ConnectionArgs {
    /// `--amqp-url` as `default` and every `--broker`, by name.
    pub fn brokers(&self) -> Result<crate::message::brokers::Brokers, String> {
        let named: Vec<(String, String)> = self
            .brokers
            .iter()
            .map(|b| (b.name.clone(), b.url.expose().to_owned()))
            .collect();
        crate::message::brokers::Brokers::new(&self.amqp_url, &named)
    }
}

/// One `--broker NAME=AMQP_URL`.
#[derive(Clone)]
pub struct BrokerArg {
    pub name: String,
    pub url: SecretUrl,
}

impl std::fmt::Debug for BrokerArg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}={:?}", self.name, self.url)
    }
}

impl std::str::FromStr for BrokerArg {
    type Err = String;

    fn from_str(spec: &str) -> Result<Self, String> {
        let (name, url) = spec
            .split_once('=')
            .ok_or_else(|| "give NAME=AMQP_URL".to_owned())?;
        crate::message::dlq::check_broker_name(name)?;
        Ok(BrokerArg {
            name: name.to_owned(),
            url: url.into(),
        })
    }
}

/// One `--management-url [NAME=]URL`: the management API of the broker NAME (none: the
/// default broker's).
#[derive(Clone)]
pub struct ManagementArg {
    pub broker: Option<String>,
    pub url: SecretUrl,
}

impl std::fmt::Debug for ManagementArg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.broker {
            Some(name) => write!(f, "{name}={:?}", self.url),
            None => write!(f, "{:?}", self.url),
        }
    }
}

impl std::str::FromStr for ManagementArg {
    type Err = String;

    /// A URL starts with its scheme; anything else is NAME=URL (a password may hold `=`).
    fn from_str(spec: &str) -> Result<Self, String> {
        let scheme = |s: &str| {
            let s = s.to_ascii_lowercase();
            s.starts_with("http://") || s.starts_with("https://")
        };
        if scheme(spec) {
            return Ok(ManagementArg {
                broker: None,
                url: spec.into(),
            });
        }
        let (name, url) = spec
            .split_once('=')
            .ok_or_else(|| "give http(s)://… or NAME=http(s)://…".to_owned())?;
        crate::message::dlq::check_broker_name(name)?;
        Ok(ManagementArg {
            broker: Some(name.to_owned()),
            url: url.into(),
        })
    }
}

/// Each broker's management API (`--management-url`), checked against the brokers.
pub fn managements(
    args: &[ManagementArg],
    brokers: &crate::message::brokers::Brokers,
) -> Result<crate::amqp::managements::Managements, String> {
    let specs: Vec<(Option<String>, String)> = args
        .iter()
        .map(|a| (a.broker.clone(), a.url.expose().to_owned()))
        .collect();
    crate::amqp::managements::Managements::new(&specs, brokers)
}

/// A secret given as a flag or variable: `Debug` shows `***`.
#[derive(Clone)]
pub struct Secret(pub String);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("***")
    }
}

impl std::str::FromStr for Secret {
    type Err = std::convert::Infallible;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(Secret(s.to_owned()))
    }
}

/// `--auth oidc`: the OpenID provider people sign in at, and what their groups give them.
#[derive(Debug, Clone, Args)]
pub struct OidcArgs {
    /// With --auth oidc: the OpenID provider's issuer URL (its discovery document is at
    /// ISSUER/.well-known/openid-configuration).
    #[arg(long, env = "LAZARUS_OIDC_ISSUER")]
    pub oidc_issuer: Option<String>,
    /// With --auth oidc: Lazarus's client id at the provider.
    #[arg(long, env = "LAZARUS_OIDC_CLIENT_ID")]
    pub oidc_client_id: Option<String>,
    /// With --auth oidc: Lazarus's client secret at the provider (better in the variable than
    /// on the command line). None: a public client, PKCE alone.
    #[arg(long, env = "LAZARUS_OIDC_CLIENT_SECRET", hide_env_values = true)]
    pub oidc_client_secret: Option<Secret>,
    /// With --auth oidc: where the provider sends people back,
    /// https://YOUR-HOST/login/oidc/callback (registered at the provider). Default: under
    /// --public-url.
    #[arg(long, env = "LAZARUS_OIDC_REDIRECT_URL")]
    pub oidc_redirect_url: Option<String>,
    /// With --auth oidc: where the provider sends people back after signing them out,
    /// https://YOUR-HOST/signed-out (registered at the provider as a post-logout redirect
    /// URI). Default: the redirect URL's, /login/oidc/callback made /signed-out.
    #[arg(long, env = "LAZARUS_OIDC_POST_LOGOUT_REDIRECT_URL")]
    pub oidc_post_logout_redirect_url: Option<String>,
    /// With --auth oidc: a session ends this many seconds after sign-in at the latest (or
    /// after --session-max-secs, if sooner), so that the roles of the groups a user was
    /// taken out of do not outlive it: the next sign-in takes them again.
    #[arg(long, env = "LAZARUS_OIDC_SESSION_MAX_SECS", default_value_t = 8 * 3600)]
    pub oidc_session_max_secs: u64,
    /// Scopes asked for besides openid (add `groups` where the provider gives the group
    /// claim only for it).
    #[arg(long = "oidc-scope", env = "LAZARUS_OIDC_SCOPE", value_delimiter = ',', default_values_t = ["profile".to_owned(), "email".to_owned()])]
    pub oidc_scopes: Vec<String>,
    /// The claim of the ID token (or userinfo) that names the user.
    #[arg(
        long,
        env = "LAZARUS_OIDC_NAME_CLAIM",
        default_value = "preferred_username"
    )]
    pub oidc_name_claim: String,
    /// The claim that lists the user's groups (a dotted path reaches into objects:
    /// realm_access.roles).
    #[arg(long, env = "LAZARUS_OIDC_ROLE_CLAIM", default_value = "groups")]
    pub oidc_role_claim: String,
    /// GROUP=ROLE or GROUP=ROLE:PATTERN: members of GROUP hold ROLE everywhere, or on the
    /// DLQs PATTERN names (repeatable; in the variable separated by ';'). A user in several
    /// mapped groups holds all their grants; taken again at every sign-in.
    #[arg(long = "oidc-role", env = "LAZARUS_OIDC_ROLE", value_delimiter = ';')]
    pub oidc_roles: Vec<crate::auth::oidc::RoleMapping>,
    /// The role of a user in no mapped group. None: they may not sign in.
    #[arg(long, env = "LAZARUS_OIDC_DEFAULT_ROLE")]
    pub oidc_default_role: Option<Role>,
}

#[derive(Debug, Clone, Args)]
pub struct DemoConfig {
    #[command(flatten)]
    pub serve: ServeConfig,

    /// Failing messages to publish through the demo topology.
    #[arg(long, default_value_t = 300)]
    pub messages: usize,
}

#[derive(Debug, Clone, Args)]
pub struct ServeConfig {
    #[command(flatten)]
    pub connection: ConnectionArgs,

    /// Address of the web dashboard and API.
    #[arg(long, env = "LAZARUS_LISTEN", default_value = "127.0.0.1:8080")]
    pub listen: SocketAddr,

    /// A dead-letter queue to archive (repeat for several; comma-separated in the env var):
    /// `name` in the AMQP URL's vhost, `vhost/name` in another (`%2F` for a `/` in the vhost).
    /// Lazarus never creates, changes or deletes it.
    #[arg(long = "queue", env = "LAZARUS_QUEUE", value_delimiter = ',')]
    pub queues: Vec<String>,

    /// Unacked deliveries the broker may push ahead per queue. Keep it at least three times
    /// --batch-size: one batch fills while the ones before it are stored (one at a time on
    /// SQLite, two at once on PostgreSQL) and acked.
    #[arg(long, env = "LAZARUS_PREFETCH", default_value_t = 2000)]
    pub prefetch: u16,

    /// Commit a batch after this many messages.
    #[arg(long, env = "LAZARUS_BATCH_SIZE", default_value_t = 500)]
    pub batch_size: usize,

    /// Commit a batch at the latest this many milliseconds after its first message.
    #[arg(long, env = "LAZARUS_BATCH_INTERVAL_MS", default_value_t = 200)]
    pub batch_interval_ms: u64,

    /// A header in which failing consumers leave their error (repeatable; case-insensitive;
    /// the first present wins). Used to group failures on the overview.
    #[arg(long = "error-header", env = "LAZARUS_ERROR_HEADER", value_delimiter = ',', default_values_t = crate::archive::DEFAULT_ERROR_HEADERS.map(String::from))]
    pub error_headers: Vec<String>,

    /// A JSON pointer into the body where failing consumers leave their error, when no
    /// --error-header holds one (repeatable; the first with text wins): e.g.
    /// /options/traceback for Dramatiq. A Python traceback is grouped by its last line.
    #[arg(long = "error-pointer", env = "LAZARUS_ERROR_POINTER", value_delimiter = ',', value_parser = crate::message::masking::check_pointer)]
    pub error_pointers: Vec<String>,

    /// A business field to extract at ingest from JSON bodies, as name=/json/pointer
    /// (repeatable): shown as a list column, searchable as name:value.
    #[arg(long = "field", env = "LAZARUS_FIELD", value_delimiter = ',')]
    pub fields: Vec<BusinessField>,

    /// Commit a batch once its bodies add up to this many bytes (bounds memory with big messages).
    #[arg(long, env = "LAZARUS_BATCH_MAX_BYTES", default_value_t = 8 * 1024 * 1024)]
    pub batch_max_bytes: usize,

    /// Replay publishes awaiting a broker confirm at most. After a crash, at most twice this
    /// many messages of a job can be published twice (the step being published and the one
    /// before it, whose confirms were not recorded yet).
    #[arg(long, env = "LAZARUS_REPLAY_WINDOW", default_value_t = 2000)]
    pub replay_window: usize,

    /// Seconds after a replay is published in which its copy dying again reopens the
    /// failure: until then the message is open ("settling"); after, it is resolved.
    #[arg(long, env = "LAZARUS_SETTLE_SECS", default_value_t = 300)]
    pub settle_secs: u64,

    /// Seconds a replay job stays claimed by an instance that stopped renewing it, before
    /// another instance takes it over.
    #[arg(long, env = "LAZARUS_JOB_LEASE_SECS", default_value_t = 15)]
    pub job_lease_secs: u64,

    /// This instance's name, the same across its restarts (default: host:listen address).
    /// While no other live process goes by it, a restart takes back its replay job at once
    /// instead of waiting for the lease. Give every instance its own.
    #[arg(long, env = "LAZARUS_INSTANCE_NAME")]
    pub instance_name: Option<String>,

    /// How callers sign in: none (loopback only), users (built-in, `lazarus user add`),
    /// proxy (X-Forwarded-User from --trusted-proxy addresses) or oidc (at an OpenID
    /// provider, --oidc-issuer).
    #[arg(long, env = "LAZARUS_AUTH", value_enum, default_value = "none")]
    pub auth: AuthMode,

    /// A reverse proxy or load balancer in front of Lazarus (repeatable): its
    /// X-Forwarded-For names the client (for the sign-in throttle and the audit log), and
    /// with --auth proxy its X-Forwarded-User and X-Forwarded-Email are believed.
    #[arg(
        long = "trusted-proxy",
        env = "LAZARUS_TRUSTED_PROXY",
        value_delimiter = ','
    )]
    pub trusted_proxies: Vec<std::net::IpAddr>,

    /// The role of a proxy user who has no role set with `lazarus user add NAME --role`.
    #[arg(long, env = "LAZARUS_PROXY_DEFAULT_ROLE", default_value = "viewer")]
    pub proxy_default_role: Role,

    /// A signed-in session unused this many seconds is ended.
    #[arg(long, env = "LAZARUS_SESSION_IDLE_SECS", default_value_t = 3600)]
    pub session_idle_secs: u64,

    /// A session ends this many seconds after sign-in, however much it is used (the
    /// cookie's lifetime too).
    #[arg(long, env = "LAZARUS_SESSION_MAX_SECS", default_value_t = 12 * 3600)]
    pub session_max_secs: u64,

    /// Mark the session cookie Secure: set it when people reach Lazarus over HTTPS.
    #[arg(long, env = "LAZARUS_SECURE_COOKIES")]
    pub secure_cookies: bool,

    #[command(flatten)]
    pub oidc: OidcArgs,

    /// A JSON pointer (e.g. /card/number) whose value viewers see as *** in bodies and
    /// business fields (repeatable).
    #[arg(long = "mask", env = "LAZARUS_MASK", value_delimiter = ',', value_parser = crate::message::masking::check_pointer)]
    pub masks: Vec<String>,

    /// An exchange replays may publish to (repeatable; `*` matches any characters,
    /// `(AMQP default)` is the default exchange). Without any, replays publish wherever a
    /// message's x-death says, which its producer wrote.
    #[arg(
        long = "replay-exchange",
        env = "LAZARUS_REPLAY_EXCHANGE",
        value_delimiter = ','
    )]
    pub replay_exchanges: Vec<String>,

    /// A connection that has not sent a whole request head within this many seconds is
    /// closed (also an idle keep-alive connection).
    #[arg(long, env = "LAZARUS_HEADER_TIMEOUT_SECS", default_value_t = 10)]
    pub header_timeout_secs: u64,

    /// HTTP connections served at once; more wait to be accepted. Default: half the
    /// process's open-file limit, at most 1024.
    #[arg(long, env = "LAZARUS_MAX_CONNECTIONS")]
    pub max_connections: Option<usize>,

    /// RabbitMQ's management API (http(s)://[user:password@]host:15672), read only: each DLQ's
    /// delivery limit is checked there when it is first consumed. Without credentials, the
    /// AMQP URL's are used. NAME=URL is the API of the --broker NAME (with its AMQP URL's
    /// credentials); repeatable, one per broker; in the variable separated by spaces.
    #[arg(
        long = "management-url",
        env = "LAZARUS_MANAGEMENT_URL",
        value_name = "[NAME=]URL",
        value_delimiter = ' ',
        hide_env_values = true
    )]
    pub management_urls: Vec<ManagementArg>,

    #[command(flatten)]
    pub retention: RetentionArgs,

    #[command(flatten)]
    pub webhooks: WebhookArgs,

    #[command(flatten)]
    pub discover: DiscoverArgs,

    /// A protobuf FileDescriptorSet (`protoc --include_imports --descriptor_set_out=FILE`):
    /// bodies of its message types are shown, searched, masked and have business fields as
    /// JSON (repeatable). A body's message is named by its `type` property, a `proto=`
    /// content-type parameter or the `--proto-header`: a full name, or a `--proto-type` alias.
    #[arg(
        long = "proto-descriptors",
        env = "LAZARUS_PROTO_DESCRIPTORS",
        value_delimiter = ','
    )]
    pub proto_descriptors: Vec<std::path::PathBuf>,

    /// TYPE=package.Message: a body whose `type` property (or `--proto-header`) is TYPE holds
    /// that protobuf message (repeatable).
    #[arg(long = "proto-type", env = "LAZARUS_PROTO_TYPE", value_delimiter = ',')]
    pub proto_types: Vec<String>,

    /// A header whose value names a body's protobuf message (or a `--proto-type` TYPE).
    #[arg(long, env = "LAZARUS_PROTO_HEADER")]
    pub proto_header: Option<String>,
}

impl ServeConfig {
    /// What ingest derives from each message, bodies decoded with `schemas`.
    pub fn ingest_rules(&self, schemas: Option<Arc<Schemas>>) -> IngestRules {
        IngestRules {
            error_headers: self.error_headers.clone(),
            error_pointers: self.error_pointers.clone(),
            fields: self.fields.clone(),
            masks: self.masks.clone(),
            schemas,
            home_vhost: crate::message::dlq::home_vhost(&self.connection.amqp_url),
        }
    }

    /// The protobuf message types of `--proto-descriptors` (none without), named as
    /// `--proto-type` and `--proto-header` say; an error names the file or alias at fault.
    pub fn schemas(&self) -> Result<Option<Arc<Schemas>>, String> {
        if self.proto_descriptors.is_empty() {
            return match self.proto_types.is_empty() && self.proto_header.is_none() {
                true => Ok(None),
                false => Err("--proto-type and --proto-header need --proto-descriptors".into()),
            };
        }
        let sets = self
            .proto_descriptors
            .iter()
            .map(|path| {
                std::fs::read(path)
                    .map(|bytes| (path.display().to_string(), bytes))
                    .map_err(|e| format!("--proto-descriptors {}: {e}", path.display()))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let schemas = Schemas::load(&sets, &self.proto_types, self.proto_header.as_deref())
            .map_err(|e| e.to_string())?;
        if schemas.is_empty() {
            return Err(format!(
                "--proto-descriptors {}: no message types in it",
                sets.iter()
                    .map(|s| s.0.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
        Ok(Some(Arc::new(schemas)))
    }

    pub fn batch_settings(&self) -> BatchSettings {
        BatchSettings {
            prefetch: self.prefetch,
            max_messages: self.batch_size.max(1),
            // Capped at an hour: a batch deadline must stay a representable instant.
            max_delay: Duration::from_millis(self.batch_interval_ms.min(3_600_000)),
            max_bytes: self.batch_max_bytes.max(1),
        }
    }

    /// The authentication settings; `none` is refused on anything but a loopback address.
    pub fn auth_settings(&self) -> Result<AuthSettings, String> {
        if self.auth == AuthMode::None && !self.listen.ip().is_loopback() {
            return Err(format!(
                "--auth none lets anyone who reaches {} replay messages: it is only allowed on a \
                 loopback address. Use --auth users or --auth proxy.",
                self.listen
            ));
        }
        if self.auth == AuthMode::Proxy && self.trusted_proxies.is_empty() {
            return Err("--auth proxy needs --trusted-proxy: the proxy's address".into());
        }
        let (oidc, session_max) = match self.auth {
            AuthMode::Oidc => (
                Some(Arc::new(self.oidc()?)),
                self.session_max_secs.min(self.oidc.oidc_session_max_secs),
            ),
            _ => (None, self.session_max_secs),
        };
        Ok(AuthSettings {
            mode: self.auth,
            trusted_proxies: self
                .trusted_proxies
                .iter()
                .map(|ip| ip.to_canonical())
                .collect(),
            proxy_default_role: self.proxy_default_role,
            session_idle: Duration::from_secs(self.session_idle_secs.max(1)),
            session_max: Duration::from_secs(session_max.max(1)),
            secure_cookies: self.secure_cookies,
            oidc,
        })
    }

    /// The OpenID provider of `--auth oidc`, its settings checked.
    fn oidc(&self) -> Result<crate::auth::oidc::Oidc, String> {
        let o = &self.oidc;
        let need = |value: &Option<String>, flag: &str| {
            value
                .clone()
                .ok_or_else(|| format!("--auth oidc needs {flag}"))
        };
        let redirect_url = match (&o.oidc_redirect_url, &self.webhooks.public_url) {
            (Some(url), _) => url.clone(),
            (None, Some(public)) => {
                format!("{}/login/oidc/callback", public.trim_end_matches('/'))
            }
            (None, None) => {
                return Err("--auth oidc needs --oidc-redirect-url (or --public-url):                      https://YOUR-HOST/login/oidc/callback"
                    .into())
            }
        };
        crate::auth::oidc::Oidc::new(crate::auth::oidc::OidcSettings {
            issuer: need(&o.oidc_issuer, "--oidc-issuer")?,
            client_id: need(&o.oidc_client_id, "--oidc-client-id")?,
            client_secret: o.oidc_client_secret.as_ref().map(|s| s.0.clone()),
            redirect_url,
            post_logout_redirect_url: o.oidc_post_logout_redirect_url.clone(),
            scopes: o.oidc_scopes.clone(),
            name_claim: o.oidc_name_claim.clone(),
            role_claim: o.oidc_role_claim.clone(),
            roles: o.oidc_roles.clone(),
            default_role: o.oidc_default_role,
        })
    }

    /// Where replays may publish (`--replay-exchange`).
    pub fn replay_policy(&self) -> crate::message::exchange_policy::ExchangePolicy {
        crate::message::exchange_policy::ExchangePolicy::new(&self.replay_exchanges)
    }

    pub fn runner_settings(
        &self,
        metrics: std::sync::Arc<crate::runtime::metrics::Metrics>,
    ) -> RunnerSettings {
        RunnerSettings {
            metrics,
            window: self.replay_window.max(1),
            lease: Duration::from_secs(self.job_lease_secs.max(1)),
            policy: Arc::new(self.replay_policy()),
            brokers: self.connection.brokers().unwrap_or_else(|_| {
                crate::message::brokers::Brokers::single(&self.connection.amqp_url)
            }),
            ..RunnerSettings::new(&self.connection.amqp_url)
        }
    }

    /// The defaults, as `lazarus serve` with no flags would run (for tests and tools).
    pub fn defaults() -> Self {
        use clap::FromArgMatches;
        let serve = ServeConfig::augment_args(clap::Command::new("serve"));
        let matches = serve.get_matches_from(["serve"]);
        ServeConfig::from_arg_matches(&matches).expect("the defaults parse")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_never_shows_secrets() {
        let mut config = ServeConfig::defaults();
        config.connection.amqp_url = "amqp://app:hunter2@mq:5672/prod".into();
        config.connection.database_url = "postgres://lazarus:dbpass@db/lazarus".into();
        config.management_urls = vec![
            "https://admin:mgmtpass@mq:15672".parse().unwrap(),
            "us=https://ops:uspass@mq-us:15672".parse().unwrap(),
        ];
        config.oidc.oidc_client_secret = Some(Secret("oidcpass".into()));
        config.webhooks.webhooks = vec!["https://u:pw1@hooks.slack.com/services/T0/B0/s3cr3t"
            .parse()
            .unwrap()];
        let debug = format!("{config:?}");
        for secret in [
            "hunter2", "dbpass", "mgmtpass", "uspass", "pw1", "s3cr3t", "oidcpass",
        ] {
            assert!(!debug.contains(secret), "{debug}");
        }
        // Derived, so no setting is left out: those a hand-written Debug once forgot are there.
        for field in [
            "settle_secs",
            "session_idle_secs",
            "session_max_secs",
            "secure_cookies",
            "proxy_default_role",
            "amqp://app:***@mq:5672/prod",
        ] {
            assert!(debug.contains(field), "{field} missing from {debug}");
        }
        assert!(debug.contains("https://hooks.slack.com/…"), "{debug}");
    }

    #[test]
    fn a_management_url_may_name_its_broker() {
        let arg = |s: &str| s.parse::<ManagementArg>();
        let plain = arg("http://mq:15672").unwrap();
        assert_eq!((plain.broker, &*plain.url), (None, "http://mq:15672"));
        // A password holding `=` is no broker name.
        let eq = arg("HTTPS://ops:a=b@mq:15671").unwrap();
        assert_eq!(eq.broker, None);
        let named = arg("us=http://ops:a=b@mq-us:15672").unwrap();
        assert_eq!(
            (named.broker.as_deref(), &*named.url),
            (Some("us"), "http://ops:a=b@mq-us:15672")
        );
        assert!(format!("{named:?}").starts_with("us="));
        assert!(!format!("{named:?}").contains("a=b"), "{named:?}");
        assert!(arg("mq:15672").is_err());
        assert!(arg("US=http://mq").is_err());
        // As LAZARUS_MANAGEMENT_URL gives them: separated by spaces.
        use clap::FromArgMatches;
        let serve = ServeConfig::augment_args(clap::Command::new("serve"));
        let matches = serve.get_matches_from([
            "serve",
            "--management-url",
            "http://a:15672 us=http://b:15672",
        ]);
        let config = ServeConfig::from_arg_matches(&matches).unwrap();
        let brokers: Vec<Option<&str>> = config
            .management_urls
            .iter()
            .map(|m| m.broker.as_deref())
            .collect();
        assert_eq!(brokers, [None, Some("us")]);
    }

    #[test]
    fn an_openid_session_lasts_no_longer_than_oidc_session_max() {
        let mut c = ServeConfig::defaults();
        c.auth = AuthMode::Oidc;
        c.oidc.oidc_issuer = Some("https://login.example.com".into());
        c.oidc.oidc_client_id = Some("lazarus".into());
        c.oidc.oidc_redirect_url = Some("https://lazarus.example.com/login/oidc/callback".into());
        c.oidc.oidc_default_role = Some(Role::Viewer);
        let max = |c: &ServeConfig| c.auth_settings().unwrap().session_max.as_secs();
        assert_eq!(max(&c), 8 * 3600, "the default");
        c.oidc.oidc_session_max_secs = 600;
        assert_eq!(max(&c), 600);
        c.session_max_secs = 300;
        assert_eq!(max(&c), 300, "--session-max-secs, when sooner");
        // Password sessions are not bound by it.
        c.auth = AuthMode::Users;
        c.session_max_secs = 12 * 3600;
        assert_eq!(max(&c), 12 * 3600);
        let post_logout = |c: &ServeConfig| c.oidc().map(|o| o.post_logout_url().to_owned());
        c.auth = AuthMode::Oidc;
        assert_eq!(
            post_logout(&c).unwrap(),
            "https://lazarus.example.com/signed-out"
        );
    }

    #[test]
    fn defaults_match_the_design() {
        let c = ServeConfig::defaults();
        assert_eq!(
            &*c.connection.amqp_url,
            "amqp://guest:guest@127.0.0.1:5672/%2f"
        );
        assert_eq!(&*c.connection.database_url, "sqlite://lazarus.db");
        assert_eq!(c.listen.to_string(), "127.0.0.1:8080");
        assert!(c.queues.is_empty());
    }
}
