//! The leaves every layer may use: values formatted as people read them, URLs whose
//! secrets stay out of logs, outgoing HTTP, reconnect backoff, logging, memory settings.
//! Nothing here imports anything else of Lazarus.

pub mod backoff;
pub mod format;
pub mod http;
pub mod memory;
pub mod secret_url;
pub mod telemetry;
