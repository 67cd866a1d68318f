//! Which deliveries of a batch are copies of archived rows (pure): a redelivery after a lost
//! ack is skipped, each archived row standing for one copy; a first delivery never is.

use std::collections::HashMap;

use super::PreparedMessage;

/// Rows archived from a queue with a fingerprint: `(queue, fingerprint) → rows`, for the
/// messages of a batch that may be copies of archived ones.
pub(crate) type ArchivedCopies = HashMap<(String, [u8; 32]), i64>;

/// What each of a batch's possible copies is looked up by: its fingerprint and the time its
/// content carries ([`fingerprint_time`](super::fingerprint_time)).
pub(crate) fn copy_keys(batch: &[PreparedMessage]) -> Vec<([u8; 32], Option<i64>)> {
    batch
        .iter()
        .filter(|m| m.may_be_archived())
        .map(|m| (m.fingerprint, m.fingerprint_time))
        .collect()
}

/// The rows a look-up by [`copy_keys`] found, as (id, queue, fingerprint), counted by queue
/// and fingerprint.
pub(crate) fn counted(rows: Vec<(i64, String, [u8; 32])>) -> ArchivedCopies {
    let mut archived = ArchivedCopies::new();
    for (_, queue, fingerprint) in rows {
        *archived.entry((queue, fingerprint)).or_default() += 1;
    }
    archived
}

/// The messages of a batch to store: all but the redeliveries (and retries, see
/// [`PreparedMessage::may_be_archived`]) that are copies of archived rows, each archived row
/// standing for one such copy in the batch; and how many were left out (pure).
pub(crate) fn without_copies(
    batch: &[PreparedMessage],
    mut archived: ArchivedCopies,
) -> (Vec<&PreparedMessage>, u64) {
    let mut duplicates = 0;
    let fresh = batch
        .iter()
        .filter(|m| {
            if !m.may_be_archived() {
                return true;
            }
            match archived.get_mut(&(m.message.queue.clone(), m.fingerprint)) {
                Some(rows) if *rows > 0 => {
                    *rows -= 1;
                    duplicates += 1;
                    false
                }
                _ => true,
            }
        })
        .collect();
    (fresh, duplicates)
}

#[cfg(test)]
mod tests {
    use time::OffsetDateTime;

    use super::*;
    use crate::archive::IncomingMessage;
    use crate::message::headers::MessageProperties;

    fn delivery(body: &[u8], redelivered: bool) -> PreparedMessage {
        PreparedMessage::new(IncomingMessage {
            broker: "default".into(),
            vhost: String::new(),
            queue: "dlq".into(),
            exchange: String::new(),
            routing_key: "dlq".into(),
            redelivered,
            properties: MessageProperties::default(),
            headers: None,
            body: body.to_vec(),
            received_at: OffsetDateTime::UNIX_EPOCH,
            decode_problems: Vec::new(),
            stream_offset: None,
        })
    }

    fn archived(rows: &[(&PreparedMessage, i64)]) -> ArchivedCopies {
        rows.iter()
            .map(|(m, n)| ((m.message.queue.clone(), m.fingerprint), *n))
            .collect()
    }

    #[test]
    fn each_archived_row_stands_for_one_redelivered_copy() {
        let (a, b) = (delivery(b"a", true), delivery(b"b", true));
        let batch = [a.clone(), a.clone(), a.clone(), b.clone()];
        let (fresh, duplicates) = without_copies(&batch, archived(&[(&a, 2)]));
        assert_eq!(duplicates, 2);
        assert_eq!(fresh.len(), 2);
        assert_eq!(fresh[0].message.body, b"a");
        assert_eq!(fresh[1].message.body, b"b");
    }

    #[test]
    fn first_deliveries_are_stored_whatever_is_archived() {
        let first = delivery(b"a", false);
        let batch = [first.clone()];
        let (fresh, duplicates) = without_copies(&batch, archived(&[(&first, 5)]));
        assert_eq!((fresh.len(), duplicates), (1, 0));
        // Unless an earlier attempt at this very batch may have stored it.
        let mut retried = first.clone();
        retried.maybe_stored = true;
        let batch = [retried];
        let (fresh, duplicates) = without_copies(&batch, archived(&[(&first, 1)]));
        assert_eq!((fresh.len(), duplicates), (0, 1));
    }

    #[test]
    fn a_copy_is_looked_for_in_its_own_queue() {
        let mut elsewhere = delivery(b"a", true);
        elsewhere.message.queue = "other.dlq".into();
        let here = delivery(b"a", true);
        let batch = [here];
        let key = ("other.dlq".to_owned(), elsewhere.fingerprint);
        let (fresh, duplicates) = without_copies(&batch, HashMap::from([(key, 1)]));
        assert_eq!((fresh.len(), duplicates), (1, 0));
    }
}
