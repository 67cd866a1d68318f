//! Bodies as real producers write them, published by the real library: kombu (Celery's
//! transport) with `compression='zlib'` and with the `msgpack` serializer, and an AMQP 1.0
//! client (python-qpid-proton) on RabbitMQ 4. Each is dead-lettered by the broker (rejected
//! by a failing worker, or expired), archived, shown decoded, found by its words and business
//! fields, and replayed byte for byte. Needs Python 3 with kombu, msgpack
//! and python-qpid-proton (`pip install kombu msgpack python-qpid-proton`; `.ci/run` does).

use std::process::Command;
use std::time::Duration;

use lapin::options::BasicGetOptions;
use serde_json::json;

use crate::helpers::*;

/// Publishes with kombu into `queue` on the default exchange: (message-id, serializer,
/// compression, body) each.
fn kombu_publish(
    url: &str,
    queue: &str,
    messages: &[(&str, &str, Option<&str>, serde_json::Value)],
) {
    let script = r#"
import json, sys
from kombu import Connection, Producer
url, queue, messages = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
with Connection(url) as conn:
    producer = Producer(conn.channel())
    for message_id, serializer, compression, body in messages:
        producer.publish(body, routing_key=queue, serializer=serializer,
                         compression=compression, message_id=message_id)
"#;
    let messages = serde_json::to_string(&messages).unwrap();
    let out = Command::new("python3")
        .args(["-c", script, url, queue, &messages])
        .output()
        .expect("python3 runs");
    assert!(
        out.status.success(),
        "kombu could not publish (pip install kombu msgpack): {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

on_both_backends!(kombu_compressed_and_msgpack_bodies_are_read_as_their_producer_wrote_them);
async fn kombu_compressed_and_msgpack_bodies_are_read_as_their_producer_wrote_them() {
    let p = unique("kombu");
    let mut t = Topology::new().await;
    // The task queue dead-letters what its (failing) worker rejects into the DLQ; replays go
    // to a queue of their own.
    let (tasks, dlq) = work_queue_with_dlq(&mut t, &p).await;
    let work = format!("{p}.replayed");
    t.queue(&work, Default::default()).await;
    let app = TestApp::spawn_with(&[&dlq], |c| {
        c.fields = vec!["invoice=/invoice".parse().unwrap()];
    })
    .await;
    let worker = rejecting_worker(&tasks).await;
    // kombu takes the vhost after the last slash, as it is: `/` for the default one.
    let url = amqp_url().replace("%2f", "/");
    kombu_publish(
        &url,
        &tasks,
        &[
            (
                "zlib-1",
                "json",
                Some("zlib"),
                json!({"task": "tasks.charge", "invoice": "INV-77", "note": "支付失败 card declined"}),
            ),
            (
                "msgpack-1",
                "msgpack",
                None,
                json!({"task": "tasks.refund", "invoice": "INV-78", "amount": 12.5}),
            ),
        ],
    );
    app.wait_for_archived(2, Duration::from_secs(20)).await;
    worker.abort();
    let zlib = app.detail_by_message_id(&dlq, "zlib-1").await;
    let msgpack = app.detail_by_message_id(&dlq, "msgpack-1").await;
    let id = |m: &serde_json::Value| m["id"].as_str().unwrap().to_owned();
    let (zlib_id, msgpack_id) = (id(&zlib), id(&msgpack));
    assert_eq!(zlib["fields"]["invoice"], "INV-77", "{zlib}");
    assert_eq!(msgpack["fields"]["invoice"], "INV-78", "{msgpack}");

    // Found by words of the decoded bodies, and by business fields.
    assert_eq!(app.found(&dlq, "declined").await, ["zlib-1"]);
    assert_eq!(app.found(&dlq, "支付失败").await, ["zlib-1"]);
    assert_eq!(app.found(&dlq, "tasks.refund").await, ["msgpack-1"]);
    assert_eq!(app.found(&dlq, "invoice:INV-78").await, ["msgpack-1"]);

    // Shown decoded, saying how.
    let page = app.get(&format!("/messages/{zlib_id}")).await.text();
    assert!(page.contains("zlib-decoded"), "the note");
    assert!(page.contains("tasks.charge"));
    let page = app.get(&format!("/messages/{msgpack_id}")).await.text();
    assert!(page.contains("MessagePack, shown as JSON"));
    assert!(page.contains("tasks.refund"));
    assert!(
        !page.contains("<textarea name=\"body\""),
        "binary: not edited as text"
    );

    // Replayed as archived: the compressed and the msgpack bytes, the compression header.
    for id in [&zlib_id, &msgpack_id] {
        let replayed = app
            .post_json(
                &format!("/api/messages/{id}/replay"),
                json!({"target": {"exchange": "", "routing_key": work}}),
                200,
            )
            .await;
        assert_eq!(replayed["outcome"], "published", "{replayed}");
        let got = t
            .channel
            .basic_get(work.as_str().into(), BasicGetOptions { no_ack: true })
            .await
            .unwrap()
            .expect("the copy arrived");
        assert_eq!(got.delivery.data, app.body(id).await, "byte for byte");
        if id == &zlib_id {
            let headers = got.delivery.properties.headers().clone().unwrap();
            assert!(headers.inner().contains_key("compression"));
        }
    }
    t.cleanup().await;
}

/// Sends `messages` (message-id, body) over AMQP 1.0 to the queue `queue` of the default vhost
/// of the broker whose AMQP 0-9-1 URL is `url`.
fn amqp10_send(url: &str, queue: &str, messages: &[(&str, serde_json::Value)]) {
    let script = r#"
import json, sys
from proton import Message
from proton.utils import BlockingConnection
url, queue, messages = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
conn = BlockingConnection(url, allowed_mechs="PLAIN", user="guest", password="guest")
sender = conn.create_sender("/queues/" + queue)
for message_id, body in messages:
    sender.send(Message(body=body, id=message_id, durable=True))
conn.close()
"#;
    let authority = url.split('@').nth(1).and_then(|a| a.split('/').next());
    let target = format!("amqp://{}", authority.expect("host:port in the AMQP URL"));
    let messages = serde_json::to_string(&messages).unwrap();
    let out = Command::new("python3")
        .args(["-c", script, &target, queue, &messages])
        .output()
        .expect("python3 runs");
    assert!(
        out.status.success(),
        "python-qpid-proton could not send (pip install python-qpid-proton): {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

on_both_backends!(amqp_1_0_bodies_are_read_as_the_values_they_hold_rabbitmq4);
/// RabbitMQ 4 gives 0-9-1 consumers a message sent over AMQP 1.0 as its encoded body sections
/// (`type: amqp-1.0`): dead-lettered by the broker, it is shown and searched as the value it
/// holds, and replayed as the bytes it was.
async fn amqp_1_0_bodies_are_read_as_the_values_they_hold_rabbitmq4() {
    use crate::brokers::Broker;
    Broker::Rabbitmq4
        .scope(async {
            let p = unique("amqp10");
            let (work, dlq, target) = (
                format!("{p}.work"),
                format!("{p}.dlq"),
                format!("{p}.target"),
            );
            let mut t = Topology::on(&Broker::Rabbitmq4.url()).await;
            t.queue(&dlq, Default::default()).await;
            t.queue(&target, Default::default()).await;
            // Everything sent to the work queue dies at once, into the DLQ.
            t.queue(
                &work,
                args(&[
                    ("x-message-ttl", lapin::types::AMQPValue::LongInt(0)),
                    ("x-dead-letter-exchange", s("")),
                    ("x-dead-letter-routing-key", s(&dlq)),
                ]),
            )
            .await;
            let app = TestApp::spawn_with(&[&dlq], |c| {
                c.connection.amqp_url = Broker::Rabbitmq4.url();
                c.fields = vec!["invoice=/invoice".parse().unwrap()];
            })
            .await;
            amqp10_send(
                &Broker::Rabbitmq4.url(),
                &work,
                &[
                    (
                        "map-1",
                        json!({"task": "charge", "invoice": "INV-9", "note": "死信 expired", "items": [1, 2.5, null]}),
                    ),
                    ("string-1", json!("plain string from proton")),
                ],
            );
            app.wait_for_archived(2, Duration::from_secs(20)).await;
            let map = app.detail_by_message_id(&dlq, "map-1").await;
            assert_eq!(map["properties"]["type"], "amqp-1.0", "{map}");
            assert_eq!(map["first_death"]["reason"], "expired", "dead-lettered by the broker");
            assert_eq!(map["fields"]["invoice"], "INV-9");
            let map_id = map["id"].as_str().unwrap().to_owned();

            assert_eq!(app.found(&dlq, "charge").await, ["map-1"]);
            assert_eq!(app.found(&dlq, "死信").await, ["map-1"]);
            assert_eq!(app.found(&dlq, "invoice:INV-9").await, ["map-1"]);
            assert_eq!(app.found(&dlq, "proton").await, ["string-1"]);

            let page = app.get(&format!("/messages/{map_id}")).await.text();
            assert!(page.contains("AMQP 1.0, shown as JSON"), "the note");
            assert!(page.contains("INV-9"));
            assert!(!page.contains("00 53 77"), "not a hex dump");

            let replayed = app
                .post_json(
                    &format!("/api/messages/{map_id}/replay"),
                    json!({"target": {"exchange": "", "routing_key": target}}),
                    200,
                )
                .await;
            assert_eq!(replayed["outcome"], "published", "{replayed}");
            let got = t
                .channel
                .basic_get(target.as_str().into(), BasicGetOptions { no_ack: true })
                .await
                .unwrap()
                .expect("the copy arrived");
            assert_eq!(got.delivery.data, app.body(&map_id).await, "byte for byte");
            assert!(got.delivery.data.starts_with(b"\x00Sw"));
            t.cleanup().await;
        })
        .await
}
