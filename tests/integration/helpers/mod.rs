//! Shared test scaffolding, by concern: the archive backend under test (`archive`), the
//! broker side (`broker`), a running Lazarus (`app`) and a tiny HTTP client (`http`). Tests
//! take it all with `use crate::helpers::*`.

mod app;
mod archive;
mod broker;
mod http;
mod tls;

pub use app::*;
pub(crate) use archive::on_both_backends;
pub use archive::*;
pub use broker::*;
pub use http::*;
pub use tls::*;

pub use crate::brokers::Vhost;
