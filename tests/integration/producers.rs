//! Bodies as real producers write them, published by the real library: kombu (Celery's
//! transport) with `compression='zlib'`, `'bzip2'` and `'lzma'` and with the `msgpack`
//! serializer, an AMQP 1.0
//! client (python-qpid-proton) on RabbitMQ 4, and Protocol Buffers encoded by the real
//! `protoc` from a `.proto` file the test writes. Each is dead-lettered by the broker
//! (rejected by a failing worker, or expired), archived, shown decoded, found by its words and
//! business fields, and replayed byte for byte. Needs Python 3 with kombu, msgpack and
//! python-qpid-proton (`pip install kombu msgpack python-qpid-proton`) and `protoc` (Debian's
//! `protobuf-compiler`); `scripts/test` installs them.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
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

/// Replays archived message `id` onto `queue` (default exchange) through the API, and takes
/// the copy that arrives there.
async fn replay_and_take(
    app: &TestApp,
    t: &Topology,
    id: &str,
    queue: &str,
) -> lapin::message::BasicGetMessage {
    let replayed = app
        .post_json(
            &format!("/api/messages/{id}/replay"),
            json!({"target": {"exchange": "", "routing_key": queue}}),
            200,
        )
        .await;
    assert_eq!(replayed["outcome"], "published", "{replayed}");
    t.channel
        .basic_get(queue.into(), BasicGetOptions { no_ack: true })
        .await
        .unwrap()
        .expect("the copy arrived")
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
            (
                "bzip2-1",
                "json",
                Some("bzip2"),
                json!({"task": "tasks.ship", "invoice": "INV-79", "note": "parcel lost"}),
            ),
            (
                "lzma-1",
                "json",
                Some("lzma"),
                json!({"task": "tasks.notify", "invoice": "INV-80", "note": "mailbox full"}),
            ),
        ],
    );
    app.wait_for_archived(4, Duration::from_secs(20)).await;
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
    assert_eq!(app.found(&dlq, "parcel lost").await, ["bzip2-1"]);
    assert_eq!(app.found(&dlq, "invoice:INV-80 mailbox").await, ["lzma-1"]);
    for (message_id, note) in [("bzip2-1", "bzip2-decoded"), ("lzma-1", "xz-decoded")] {
        let m = app.detail_by_message_id(&dlq, message_id).await;
        let page = app.get(&format!("/messages/{}", id(&m))).await.text();
        assert!(page.contains(note), "{message_id}: {note}");
    }

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
        let got = replay_and_take(&app, &t, id, &work).await;
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
                c.connection.amqp_url = Broker::Rabbitmq4.url().into();
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

            let got = replay_and_take(&app, &t, &map_id, &target).await;
            assert_eq!(got.delivery.data, app.body(&map_id).await, "byte for byte");
            assert!(got.delivery.data.starts_with(b"\x00Sw"));
            t.cleanup().await;
        })
        .await
}

/// The shop's failure event, as a team would write it: nested message, enum, map, repeated
/// field and a well-known type imported from protobuf's own files.
const SHOP_PROTO: &str = r#"
syntax = "proto3";
package shop.v1;
import "google/protobuf/timestamp.proto";

message Customer {
  string email = 1;
  string name = 2;
}

message OrderFailed {
  enum Reason {
    REASON_UNSPECIFIED = 0;
    CARD_DECLINED = 1;
  }
  string order_id = 1;
  int64 amount_cents = 2;
  Customer customer = 3;
  repeated string tags = 4;
  Reason reason = 5;
  map<string, string> labels = 6;
  google.protobuf.Timestamp failed_at = 7;
}
"#;

/// Runs protoc in `dir` (which holds the .proto files) with `args`, feeding it `input`.
pub(crate) fn protoc(dir: &Path, args: &[&str], input: &str) -> Vec<u8> {
    let mut child = Command::new("protoc")
        .current_dir(dir)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("protoc runs (apt-get install protobuf-compiler)");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "protoc {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// The descriptor set of [`SHOP_PROTO`] and an `OrderFailed` per text-format message, all
/// made by protoc.
fn shop_protobuf(dir: &Path, orders: &[&str]) -> (PathBuf, Vec<Vec<u8>>) {
    std::fs::write(dir.join("shop.proto"), SHOP_PROTO).unwrap();
    let set = dir.join("shop.pb");
    protoc(
        dir,
        &[
            "--include_imports",
            "--descriptor_set_out=shop.pb",
            "shop.proto",
        ],
        "",
    );
    let bodies = orders
        .iter()
        .map(|text| protoc(dir, &["--encode=shop.v1.OrderFailed", "shop.proto"], text))
        .collect();
    (set, bodies)
}

/// A card payment in protobuf: the descriptor set of `pay.Payment { order, card { number,
/// exp } }` and one such message, built by protoc in `dir`.
pub(crate) fn payment_protobuf(dir: &Path, order: &str, number: &str) -> (PathBuf, Vec<u8>) {
    std::fs::write(
        dir.join("pay.proto"),
        "syntax = \"proto3\"; package pay;\n\
         message Card { string number = 1; string exp = 2; }\n\
         message Payment { string order = 1; Card card = 2; }\n",
    )
    .unwrap();
    protoc(dir, &["--descriptor_set_out=pay.pb", "pay.proto"], "");
    let text = format!(r#"order: "{order}" card {{ number: "{number}" exp: "12/29" }}"#);
    let body = protoc(dir, &["--encode=pay.Payment", "pay.proto"], &text);
    (dir.join("pay.pb"), body)
}

on_both_backends!(protobuf_bodies_are_decoded_with_the_descriptor_set_they_were_built_from);
/// With `--proto-descriptors`, a protobuf body named by its `type` property (directly, or
/// through a `--proto-type` alias) is shown as its fields, found by their words and business
/// fields, masked like JSON, and replayed as the bytes it was; one that does not decode is
/// shown as bytes with a note, and one whose type is unknown by field numbers.
async fn protobuf_bodies_are_decoded_with_the_descriptor_set_they_were_built_from() {
    let dir = tempfile::tempdir().unwrap();
    let (set, bodies) = shop_protobuf(
        dir.path(),
        &[
            r#"order_id: "ORD-4711" amount_cents: 129900 reason: CARD_DECLINED
               customer { email: "ada@example.com" name: "Ada Lovelace" }
               tags: "vip" tags: "express" labels { key: "region" value: "eu-west" }
               failed_at { seconds: 1796342400 }"#,
            r#"order_id: "ORD-4712" amount_cents: 5 customer { name: "Grace Hopper" }
               tags: "退款失败""#,
        ],
    );
    let p = unique("protobuf");
    let mut t = Topology::new().await;
    let (work, dlq) = work_queue_with_dlq(&mut t, &p).await;
    let target = format!("{p}.replayed");
    t.queue(&target, Default::default()).await;
    let app = TestApp::spawn_with(&[&dlq], |c| {
        c.proto_descriptors = vec![set.clone()];
        c.proto_types = vec!["order.failed=shop.v1.OrderFailed".into()];
        c.fields = vec!["order=/order_id".parse().unwrap()];
        c.masks = vec!["/customer/email".into()];
    })
    .await;
    let worker = rejecting_worker(&work).await;
    let props = |id: &str, kind: &str, content_type: &str| {
        lapin::BasicProperties::default()
            .with_message_id(id.into())
            .with_type(kind.into())
            .with_content_type(content_type.into())
            .with_delivery_mode(2)
    };
    let garbage = vec![0x0a, 0xff, 0xff, 0x7f, 0x01];
    let raw = bodies[1].clone();
    for (body, properties) in [
        (
            &bodies[0],
            props("pb-1", "shop.v1.OrderFailed", "application/x-protobuf"),
        ),
        (
            &bodies[1],
            props("pb-2", "order.failed", "application/octet-stream"),
        ),
        (
            &garbage,
            props("pb-bad", "shop.v1.OrderFailed", "application/x-protobuf"),
        ),
        (
            &raw,
            props("pb-raw", "something.else", "application/x-protobuf"),
        ),
    ] {
        t.publish("", &work, body, properties).await;
    }
    app.wait_for_archived(4, Duration::from_secs(20)).await;
    worker.abort();

    // Business fields and words of the decoded fields, nested ones and enum names included.
    let first = app.detail_by_message_id(&dlq, "pb-1").await;
    let second = app.detail_by_message_id(&dlq, "pb-2").await;
    assert_eq!(first["fields"]["order"], "ORD-4711", "{first}");
    assert_eq!(second["fields"]["order"], "ORD-4712", "{second}");
    assert_eq!(app.found(&dlq, "order:ORD-4711").await, ["pb-1"]);
    assert_eq!(app.found(&dlq, "Lovelace CARD_DECLINED").await, ["pb-1"]);
    assert_eq!(app.found(&dlq, "eu-west").await, ["pb-1"]);
    // The same bytes under a type nobody mapped are read by field number: strings still found.
    assert_eq!(app.found(&dlq, "Hopper").await, ["pb-2", "pb-raw"]);
    assert_eq!(app.found(&dlq, "退款").await, ["pb-2", "pb-raw"]);
    assert_eq!(app.found(&dlq, "express vip").await, ["pb-1"]);
    // The masked value is kept out of the index, as in a JSON body.
    assert!(app.found(&dlq, "ada@example.com").await.is_empty());
    assert!(app.found(&dlq, "example").await.is_empty());

    // Shown as fields, saying how; the timestamp as a date.
    let id = |m: &serde_json::Value| m["id"].as_str().unwrap().to_owned();
    let page = app.get(&format!("/messages/{}", id(&first))).await.text();
    assert!(
        page.contains("Protocol Buffers message shop.v1.OrderFailed, shown as JSON"),
        "the note"
    );
    for shown in [
        "amount_cents",
        "129900",
        "Ada Lovelace",
        "CARD_DECLINED",
        "2026-12-04T00:00:00Z",
    ] {
        assert!(page.contains(shown), "{shown} on the page");
    }
    let bad = app.detail_by_message_id(&dlq, "pb-bad").await;
    let page = app.get(&format!("/messages/{}", id(&bad))).await.text();
    assert!(page.contains("does not decode"), "the note says why");
    assert!(page.contains("hex dump"));
    let raw = app.detail_by_message_id(&dlq, "pb-raw").await;
    let page = app.get(&format!("/messages/{}", id(&raw))).await.text();
    assert!(page.contains("type unknown, fields by number"));
    assert!(
        page.contains("Grace Hopper"),
        "strings read without the schema"
    );

    // Replayed as archived: the protobuf bytes protoc wrote.
    for (message, original) in [(&first, &bodies[0]), (&second, &bodies[1])] {
        let got = replay_and_take(&app, &t, &id(message), &target).await;
        assert_eq!(&got.delivery.data, original, "byte for byte");
    }
    t.cleanup().await;
}

#[tokio::test]
async fn a_descriptor_set_that_is_not_one_stops_lazarus_with_the_reason() {
    let dir = tempfile::tempdir().unwrap();
    let (set, _) = shop_protobuf(dir.path(), &[]);
    let mut config = lazarus::config::ServeConfig::defaults();
    config.proto_descriptors = vec![dir.path().join("shop.proto")];
    let err = config.schemas().unwrap_err();
    assert!(
        err.contains("shop.proto is not a FileDescriptorSet"),
        "{err}"
    );
    config.proto_descriptors = vec![set];
    config.proto_types = vec!["x=shop.v1.Nope".into()];
    let err = config.schemas().unwrap_err();
    assert!(
        err.contains("no message shop.v1.Nope") && err.contains("shop.v1.OrderFailed"),
        "{err}"
    );
    config.proto_types.clear();
    assert!(config.schemas().unwrap().is_some());
}
