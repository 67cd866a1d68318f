//! The JSON API, the pages' twin: messages, groups, replay plans and jobs, exports and
//! downloads, and its OpenAPI description (`/api/openapi.json`, `/api`).

pub mod download;
pub mod export;
pub mod groups;
pub mod messages;
pub mod replays;
pub mod schemas;
