//! This process while it runs: its Prometheus metrics, the consumers' and database's state
//! for `/readyz`, and its instance name with the lock that makes it its own.

pub mod instance;
pub mod metrics;
pub mod status;
