//! Framework error-queue conventions (pure): the frameworks that do not dead-letter through
//! the broker but republish a failed message with headers (or a body) of their own — Spring
//! AMQP, MassTransit, NServiceBus, Dramatiq, Symfony Messenger, Watermill. From a delivery
//! this reads which convention it follows, its error and stack trace, the queue it failed in,
//! its message type and where a replay sends it; and it names the headers a replay strips.
//! A malformed convention header is said in words, never fatal.

mod dramatiq;
mod fields;
mod masstransit;
mod mt_address;
mod nservicebus;
mod php;
mod spring;
mod symfony;
mod watermill;

use crate::message::death::ReplayTarget;
use crate::message::headers::Table;

pub use fields::{MAX_BODY_BYTES, MAX_TEXT_BYTES, MAX_TRACE_BYTES};

/// A framework whose error queue Lazarus reads (its [`Convention::name`] in the API).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize, utoipa::ToSchema,
)]
pub enum Convention {
    #[serde(rename = "spring-amqp")]
    SpringAmqp,
    #[serde(rename = "masstransit")]
    MassTransit,
    #[serde(rename = "nservicebus")]
    NServiceBus,
    #[serde(rename = "dramatiq")]
    Dramatiq,
    #[serde(rename = "symfony-messenger")]
    SymfonyMessenger,
    #[serde(rename = "watermill")]
    Watermill,
}

impl Convention {
    pub const ALL: [Convention; 6] = [
        Convention::SpringAmqp,
        Convention::MassTransit,
        Convention::NServiceBus,
        Convention::Dramatiq,
        Convention::SymfonyMessenger,
        Convention::Watermill,
    ];

    /// Its stable name, as the archive stores it.
    pub fn name(self) -> &'static str {
        match self {
            Convention::SpringAmqp => "spring-amqp",
            Convention::MassTransit => "masstransit",
            Convention::NServiceBus => "nservicebus",
            Convention::Dramatiq => "dramatiq",
            Convention::SymfonyMessenger => "symfony-messenger",
            Convention::Watermill => "watermill",
        }
    }

    /// Its name on pages.
    pub fn label(self) -> &'static str {
        match self {
            Convention::SpringAmqp => "Spring AMQP",
            Convention::MassTransit => "MassTransit",
            Convention::NServiceBus => "NServiceBus",
            Convention::Dramatiq => "Dramatiq",
            Convention::SymfonyMessenger => "Symfony Messenger",
            Convention::Watermill => "Watermill",
        }
    }

    pub fn parse(name: &str) -> Option<Self> {
        Convention::ALL.into_iter().find(|c| c.name() == name)
    }

    /// Whether a replay strips this header: the failure headers the framework writes, as
    /// its own retry (or Particular's ServiceControl and MassTransit connector) strips them;
    /// never anything else. Names are matched without regard to ASCII case, as they are read.
    pub fn is_failure_header(self, name: &str) -> bool {
        match self {
            Convention::SpringAmqp => spring::is_failure_header(name),
            Convention::MassTransit => masstransit::is_failure_header(name),
            Convention::NServiceBus => nservicebus::is_failure_header(name),
            // Dramatiq leaves its error in the body; the broker's death headers are stripped
            // as every dead letter's are.
            Convention::Dramatiq => false,
            Convention::SymfonyMessenger => symfony::is_failure_header(name),
            Convention::Watermill => watermill::is_failure_header(name),
        }
    }
}

impl std::fmt::Display for Convention {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.label())
    }
}

/// What ingest knows of a delivery.
#[derive(Debug, Clone, Copy)]
pub struct Delivery<'a> {
    /// The DLQ's name (unqualified).
    pub queue: &'a str,
    /// The DLQ's vhost as the broker names it (`/` for the default).
    pub vhost: &'a str,
    /// The routing key it was delivered with.
    pub routing_key: &'a str,
    pub headers: Option<&'a Table>,
    /// The decoded body text, when it is text (JSON for most). Read at most
    /// [`MAX_BODY_BYTES`] of it.
    pub body_text: Option<&'a str>,
}

/// What a framework's error queue says of a failure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FrameworkFailure {
    pub convention: Convention,
    /// The exception type, where the framework writes it apart (a trace may name its root).
    pub error_type: Option<String>,
    pub message: Option<String>,
    pub stack_trace: Option<String>,
    /// Where the error and stack trace were found (`x-exception-stacktrace`,
    /// `body options.traceback`, …), for the message page.
    pub found_in: Vec<String>,
    /// The queue the message failed in, in the DLQ's vhost.
    pub failed_queue: Option<String>,
    /// The message's type (`Shop.Contracts.SubmitOrder`, an actor's name, a PHP class).
    pub message_type: Option<String>,
    /// The consumer that failed: MassTransit's consumer type, NServiceBus' endpoint,
    /// Watermill's handler, Symfony's original transport.
    pub consumer: Option<String>,
    /// Where a replay sends it, by the convention (`None` when it does not say).
    pub target: Option<ReplayTarget>,
    /// What gave the target (`x-original-exchange, x-original-routingKey`, …).
    pub target_from: Option<String>,
    /// Malformed convention headers and hazards, said plainly.
    pub problems: Vec<String>,
}

impl FrameworkFailure {
    fn new(convention: Convention) -> Self {
        FrameworkFailure {
            convention,
            error_type: None,
            message: None,
            stack_trace: None,
            found_in: Vec::new(),
            failed_queue: None,
            message_type: None,
            consumer: None,
            target: None,
            target_from: None,
            problems: Vec::new(),
        }
    }
}

/// The framework convention a dead letter follows, if any: the first whose signature
/// headers (or body) it carries, in the order of [`Convention::ALL`] but for bodies, which
/// are looked at only when no header decides.
pub fn read(delivery: &Delivery<'_>) -> Option<FrameworkFailure> {
    let seen = Signature::of(delivery.headers);
    let failure = if seen.spring {
        spring::read(delivery)
    } else if seen.masstransit {
        masstransit::read(delivery)
    } else if seen.nservicebus_fault {
        nservicebus::read(delivery)
    } else if seen.symfony {
        symfony::read(delivery)
    } else if seen.watermill {
        watermill::read(delivery)
    } else if seen.nservicebus && !seen.death {
        // NServiceBus' own transport removes `x-death` on receive: a message with it was
        // dead-lettered by the broker, not moved to the error queue by NServiceBus.
        nservicebus::read(delivery)
    } else if let Some(failure) = symfony::read_body(delivery) {
        failure
    } else {
        dramatiq::read(delivery)?
    };
    Some(failure)
}

/// Whether a convention may read more of a body than its first `head` holds: a Dramatiq
/// message (or any body of a `.XQ` queue) and a PHP-serialized Symfony envelope. Ingest
/// decodes the start of each body for search; only these bodies are decoded further, up to
/// [`MAX_BODY_BYTES`], so that others cost nothing more.
pub fn reads_body(queue: &str, head: &str) -> bool {
    dramatiq::may_read(queue, head) || symfony::may_read(head)
}

/// Which conventions' headers a table carries, from one pass over its names.
#[derive(Default)]
struct Signature {
    spring: bool,
    masstransit: bool,
    nservicebus_fault: bool,
    nservicebus: bool,
    symfony: bool,
    watermill: bool,
    death: bool,
}

impl Signature {
    fn of(headers: Option<&Table>) -> Self {
        let mut seen = Signature::default();
        for name in headers.into_iter().flat_map(Table::keys) {
            let Some(name) = name.as_str() else { continue };
            seen.spring |= spring::is_signature(name);
            seen.masstransit |= masstransit::is_signature(name);
            seen.nservicebus_fault |= nservicebus::is_fault_signature(name);
            seen.nservicebus |= starts_with_ignore_case(name, "NServiceBus.");
            seen.symfony |= symfony::is_signature(name);
            seen.watermill |= watermill::is_signature(name);
            seen.death |= name == "x-death";
        }
        seen
    }
}

fn starts_with_ignore_case(name: &str, prefix: &str) -> bool {
    name.len() >= prefix.len()
        && name.as_bytes()[..prefix.len()].eq_ignore_ascii_case(prefix.as_bytes())
}

fn strip_suffix<'a>(name: &'a str, suffix: &str) -> Option<&'a str> {
    name.strip_suffix(suffix).filter(|rest| !rest.is_empty())
}

#[cfg(test)]
mod tests;
