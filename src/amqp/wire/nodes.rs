//! Which node of a broker given as several addresses a connection opens to: the nodes in
//! turn, from the one after the node that failed last, any node whose connection was blocked
//! by a resource alarm tried after the others. One rotation per broker for the whole process:
//! once one connection finds the node that answers, every other (re)connect starts there.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex};

use crate::message::broker_nodes::BrokerNodes;

/// The order to try a broker's nodes in (pure).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Rotation {
    /// The node tried first.
    first: usize,
    /// Nodes whose last connection the broker blocked (a memory or disk alarm).
    alarmed: Vec<bool>,
}

impl Rotation {
    pub(super) fn new(nodes: usize) -> Self {
        Rotation {
            first: 0,
            alarmed: vec![false; nodes.max(1)],
        }
    }

    /// Every node once: from the first in turn, those under an alarm last.
    pub(super) fn order(&self) -> Vec<usize> {
        let n = self.alarmed.len();
        let turn = (0..n).map(|k| (self.first + k) % n);
        let (clear, alarmed): (Vec<usize>, Vec<usize>) = turn.partition(|&i| !self.alarmed[i]);
        clear.into_iter().chain(alarmed).collect()
    }

    /// A connection to `node` opened: the next (re)connect tries it first. Whether it is
    /// still under an alarm, its new connection will be told.
    pub(super) fn connected(&mut self, node: usize) {
        self.first = node;
        self.alarmed[node] = false;
    }

    /// `node` did not answer, or its connection died: the next (re)connect starts after it
    /// (unless another connection moved on already).
    pub(super) fn failed(&mut self, node: usize) {
        if self.first == node {
            self.first = (node + 1) % self.alarmed.len();
        }
    }

    /// The broker blocked (or unblocked) a connection to `node` for a resource alarm.
    pub(super) fn blocked(&mut self, node: usize, blocked: bool) {
        self.alarmed[node] = blocked;
    }
}

/// Each broker's rotation, by its addresses.
static ROTATIONS: LazyLock<Mutex<HashMap<String, Arc<Mutex<Rotation>>>>> =
    LazyLock::new(Default::default);

/// The process's rotation of `broker`'s nodes.
pub(super) fn rotation(broker: &BrokerNodes) -> Arc<Mutex<Rotation>> {
    let mut rotations = ROTATIONS.lock().expect("rotations lock poisoned");
    rotations
        .entry(broker.addresses())
        .or_insert_with(|| Arc::new(Mutex::new(Rotation::new(broker.nodes().len()))))
        .clone()
}

/// The node a connection is open to, and the rotation to tell what happens to it.
pub(super) struct Placement {
    rotation: Arc<Mutex<Rotation>>,
    index: usize,
    address: String,
}

impl Placement {
    /// A connection to `broker`'s node `index` opened.
    pub(super) fn connected(rotation: Arc<Mutex<Rotation>>, index: usize, address: &str) -> Self {
        rotation
            .lock()
            .expect("rotation lock poisoned")
            .connected(index);
        Placement {
            rotation,
            index,
            address: address.to_owned(),
        }
    }

    /// `host:port`, no secret in it.
    pub(super) fn address(&self) -> &str {
        &self.address
    }

    pub(super) fn failed(&self) {
        self.rotation
            .lock()
            .expect("rotation lock poisoned")
            .failed(self.index);
    }

    pub(super) fn blocked(&self, blocked: bool) {
        self.rotation
            .lock()
            .expect("rotation lock poisoned")
            .blocked(self.index, blocked);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nodes_are_tried_in_turn_from_the_first() {
        let r = Rotation::new(3);
        assert_eq!(r.order(), [0, 1, 2]);
        assert_eq!(Rotation::new(1).order(), [0]);
    }

    #[test]
    fn a_reconnect_starts_after_the_node_that_failed_last() {
        let mut r = Rotation::new(3);
        r.connected(0);
        // Node 0 dies: everyone goes on from node 1, and stays there once it answers.
        r.failed(0);
        assert_eq!(r.order(), [1, 2, 0]);
        r.connected(1);
        assert_eq!(r.order(), [1, 2, 0]);
        // Another connection that was on node 0 hears of its death late: no change.
        r.failed(0);
        assert_eq!(r.order(), [1, 2, 0]);
        // Node 1 dies, node 2 does not answer either: node 0 (back by now) comes next.
        r.failed(1);
        assert_eq!(r.order(), [2, 0, 1]);
        r.failed(2);
        assert_eq!(r.order(), [0, 1, 2]);
        // The last node wraps around to the first.
        r.connected(2);
        r.failed(2);
        assert_eq!(r.order(), [0, 1, 2]);
    }

    #[test]
    fn a_node_under_an_alarm_is_tried_after_the_others() {
        let mut r = Rotation::new(3);
        r.connected(0);
        r.blocked(0, true);
        assert_eq!(r.order(), [1, 2, 0]);
        r.blocked(1, true);
        assert_eq!(r.order(), [2, 0, 1]);
        // Every node under the alarm (RabbitMQ's alarms hold the whole cluster): in turn.
        r.blocked(2, true);
        assert_eq!(r.order(), [0, 1, 2]);
        // Cleared by an unblock, or by a new connection to it.
        r.blocked(1, false);
        assert_eq!(r.order(), [1, 0, 2]);
        r.connected(2);
        assert_eq!(r.order(), [2, 1, 0]);
    }

    #[test]
    fn one_rotation_per_broker() {
        let a = BrokerNodes::parse("amqp://u:p@rot-a1,rot-a2/v").unwrap();
        let same = BrokerNodes::parse("amqp://other:pw@rot-a1,rot-a2/w").unwrap();
        let b = BrokerNodes::parse("amqp://u:p@rot-b1,rot-b2/v").unwrap();
        rotation(&a).lock().unwrap().failed(0);
        assert_eq!(rotation(&same).lock().unwrap().order(), [1, 0]);
        assert_eq!(rotation(&b).lock().unwrap().order(), [0, 1]);
    }
}
