//! The dead letter itself, pure: its headers and properties as typed values and as the
//! bytes the wire carries (`headers`, `codec`), its queue's name (`dlq`), its `x-death`
//! history (`death`), its body as text and decoded (`body`, `structured`), masked
//! (`masking`), the framework that failed it and why (`conventions`, `cause`), the search
//! language that finds it (`search`, `field_match`, `cjk`), and where a replay of it may go
//! (`exchange_policy`); and the broker it came from: its vhost and its nodes, from the AMQP
//! URL (`dlq`, `broker_nodes`), and the brokers by name (`brokers`). Nothing here imports anything else of Lazarus.

pub mod body;
pub mod broker_nodes;
pub mod brokers;
pub mod cause;
pub mod cjk;
pub mod codec;
pub mod conventions;
pub mod death;
pub mod dlq;
pub mod exchange_policy;
pub mod field_match;
pub mod headers;
pub mod masking;
pub mod search;
pub mod structured;
