//! Shared test scaffolding, by concern: the archive backend under test (`archive`), the
//! broker side (`broker`), a running Lazarus (`app`), a tiny HTTP client (`http`), a WebDriver
//! client for Chromium (`browser`), a TCP forwarder for network faults (`proxy`) and waiting
//! for a condition (`poll`). Tests take it all with `use crate::helpers::*`.

mod app;
mod archive;
mod broker;
mod browser;
mod http;
mod poll;
mod proxy;
mod tls;

pub use app::*;
pub(crate) use archive::on_both_backends;
pub use archive::*;
pub use broker::*;
pub use browser::*;
pub use http::*;
pub use poll::*;
pub use proxy::*;
pub use tls::*;

pub use crate::brokers::Vhost;
