//! Symfony Messenger 5.4, run for real (Debian's php-cli, php-amqp and php-symfony-*, which
//! `scripts/test` installs): `frameworks/symfony_failure.php` dispatches a message whose handler
//! throws a chained exception, retries it once on its AMQP transport, and the worker sends it
//! on to the AMQP failure transport — with the Symfony (JSON) serializer or the default
//! PhpSerializer.

use lazarus::message::conventions::Convention;
use lazarus::message::death::ReplayTarget;

use super::{names, script, Produced};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SymfonySerializer {
    /// `messenger.transport.symfony_serializer`: stamps in `X-Message-Stamp-*` headers.
    Json,
    /// The default: the whole envelope PHP-serialized in the body.
    Php,
}

/// `{p}.async` (exchange and queue) is the transport that failed, `{p}.failed` the failure
/// transport whose queue holds the message.
pub async fn symfony(url: &str, p: &str, serializer: SymfonySerializer, invoice: &str) -> Produced {
    // php-amqp takes the vhost from the DSN's path, after the exchange name is split off.
    let format = match serializer {
        SymfonySerializer::Json => "json",
        SymfonySerializer::Php => "php",
    };
    let out = tokio::process::Command::new("php")
        .arg(script("symfony_failure.php"))
        .args([url, p, format, invoice])
        .output()
        .await
        .expect("php runs (scripts/test installs php-cli php-amqp php-symfony-messenger)");
    assert!(
        out.status.success(),
        "the Symfony worker: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let (source, failed) = (format!("{p}.async"), format!("{p}.failed"));
    let failure_headers = match serializer {
        SymfonySerializer::Json => [
            "ErrorDetailsStamp",
            "SentToFailureTransportStamp",
            "DelayStamp",
            "RedeliveryStamp",
        ]
        .iter()
        .map(|s| format!("X-Message-Stamp-Symfony\\Component\\Messenger\\Stamp\\{s}"))
        .collect(),
        SymfonySerializer::Php => vec![],
    };
    Produced {
        convention: Convention::SymfonyMessenger,
        dlq: failed.clone(),
        lands_in: source.clone(),
        target: Some(ReplayTarget {
            exchange: String::new(),
            routing_key: source.clone(),
        }),
        failed_queue: Some(source.clone()),
        message_type: Some("SendInvoice".into()),
        error_type: Some("InvoiceFailed".into()),
        message: format!("invoice {invoice} could not be sent"),
        root_type: "CustomerNotFound".into(),
        failure_headers,
        kept_headers: match serializer {
            SymfonySerializer::Json => names(&["type"]),
            SymfonySerializer::Php => vec![],
        },
        queues: vec![source.clone(), failed.clone()],
        exchanges: vec![source, failed],
    }
}
