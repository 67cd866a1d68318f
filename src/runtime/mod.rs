//! This process while it runs: its Prometheus metrics, the consumers' and database's state
//! for `/readyz`, its instance name with the lock that makes it its own, the indexer that
//! writes the search entries ingest appended without, and the planner statistics kept
//! current after bursts.

pub mod indexer;
pub mod instance;
pub mod metrics;
pub mod statistics;
pub mod status;
