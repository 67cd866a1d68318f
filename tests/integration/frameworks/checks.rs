//! Each producer against the real broker: the failure it leaves, taken back from its error
//! queue, reads as its convention — convention, target, failed queue, message type, error
//! and root cause — and a republish to the convention's target (or the broker's, for
//! Dramatiq) without the convention's failure headers lands in the queue that failed, as a
//! plain lapin or amqplib consumer sees it.

use lazarus::message::cause::Cause;
use lazarus::message::conventions::FrameworkFailure;
use lazarus::message::death::ReplayTarget;

use super::*;

/// Takes the failure from its DLQ and checks what the convention reads of it.
async fn taken_and_read(url: &str, produced: &Produced) -> (Taken, FrameworkFailure) {
    let taken = take(url, &produced.dlq).await;
    let vhost = vhost_of(url);
    let read = taken.convention(&produced.dlq, &vhost);
    let f = read.unwrap_or_else(|| panic!("no convention in {taken:?}"));
    assert_eq!(f.convention, produced.convention);
    assert_eq!(f.target, produced.target, "{f:?}");
    assert_eq!(f.failed_queue, produced.failed_queue, "{f:?}");
    assert_eq!(f.message_type, produced.message_type, "{f:?}");
    assert_eq!(f.error_type, produced.error_type, "{f:?}");
    if !produced.root_type.is_empty() {
        let cause = Cause::from_parts(
            f.error_type.as_deref(),
            f.message.as_deref(),
            f.stack_trace.as_deref(),
        );
        assert_eq!(
            cause.error_type.as_deref(),
            Some(produced.root_type.as_str()),
            "{f:?}"
        );
    }
    if !produced.message.is_empty() {
        let said = f
            .message
            .clone()
            .or_else(|| f.stack_trace.clone())
            .unwrap_or_default();
        assert!(said.contains(&produced.message), "{said}");
    }
    let names = taken.header_names();
    for h in &produced.failure_headers {
        assert!(names.contains(h), "{h} is on the message: {names:?}");
        assert!(f.convention.is_failure_header(h), "{h} is stripped");
    }
    for h in &produced.kept_headers {
        assert!(names.contains(h), "{h} is on the message: {names:?}");
        assert!(!f.convention.is_failure_header(h), "{h} is kept");
    }
    (taken, f)
}

/// Republishes the message as a replay would: to the convention's target (or the broker's
/// first death), without the convention's failure headers and the broker's death headers.
async fn republish(url: &str, taken: &Taken, f: &FrameworkFailure) -> ReplayTarget {
    let target = f
        .target
        .clone()
        .or_else(|| lazarus::message::death::decode(taken.headers.as_ref()).replay_target);
    let target = target.expect("the convention or x-death gives the target");
    let mut headers = taken.headers.clone().unwrap_or_default();
    headers.retain(|k, _| {
        let name = k.to_text();
        !f.convention.is_failure_header(&name) && !lazarus::message::death::is_death_header(k)
    });
    let t = Topology::on(url).await;
    let properties = taken.properties.to_lapin(Some(&headers));
    t.publish(
        &target.exchange,
        &target.routing_key,
        &taken.body,
        properties,
    )
    .await;
    t.cleanup().await;
    target
}

/// Produces, reads, republishes, and checks what arrives where it failed.
async fn round_trip(url: &str, produced: Produced) {
    let (taken, f) = taken_and_read(url, &produced).await;
    let target = republish(url, &taken, &f).await;
    let back = take(url, &produced.lands_in).await;
    assert_eq!(
        (back.body.as_slice(), back.exchange.as_str()),
        (taken.body.as_slice(), target.exchange.as_str())
    );
    let names = back.header_names();
    for h in &produced.failure_headers {
        assert!(!names.contains(h), "{h} was stripped: {names:?}");
    }
    for h in &produced.kept_headers {
        assert!(names.contains(h), "{h} was kept: {names:?}");
    }
    produced.cleanup(url).await;
}

#[tokio::test]
async fn spring_recoverer_gives_its_original_exchange_and_the_root_cause() {
    let url = amqp_url();
    round_trip(&url, spring(&url, &unique("spring"), "1007").await).await;
}

#[tokio::test]
async fn masstransit_fault_gives_its_input_queue_in_a_vhost_too() {
    let url = amqp_url();
    round_trip(&url, masstransit_fault(&url, &unique("mt"), "42").await).await;
    let vhost = Vhost::create("mtvh");
    let url = vhost.url();
    let produced = masstransit_fault(&url, &unique("mt"), "43").await;
    let (taken, f) = taken_and_read(&url, &produced).await;
    // Read as if its DLQ were in another vhost: the address' vhost is not this one.
    let elsewhere = taken.convention(&produced.dlq, "/").unwrap();
    assert_eq!(elsewhere.target, None);
    assert!(
        elsewhere.problems[0].contains(&format!("names vhost \"{}\"", vhost.name)),
        "{:?}",
        elsewhere.problems
    );
    assert!(f.problems.is_empty(), "{:?}", f.problems);
    produced.cleanup(&url).await;
}

#[tokio::test]
async fn masstransit_skipped_failed_in_the_queue_before_skipped() {
    let url = amqp_url();
    round_trip(&url, masstransit_skipped(&url, &unique("mt"), "44").await).await;
}

#[tokio::test]
async fn nservicebus_error_queue_gives_failed_q_and_the_inner_exception() {
    let url = amqp_url();
    round_trip(&url, nservicebus(&url, &unique("nsb"), "45").await).await;
}

#[tokio::test]
async fn watermill_poison_gives_its_topic() {
    let url = amqp_url();
    round_trip(&url, watermill(&url, &unique("wm"), "46").await).await;
}

#[tokio::test]
async fn a_real_dramatiq_failure_reads_from_its_xq() {
    let url = amqp_url();
    round_trip(&url, dramatiq(&url, &unique("dq"), "47").await).await;
}

#[tokio::test]
async fn a_real_symfony_failure_reads_from_its_stamp_headers() {
    let url = amqp_url();
    round_trip(
        &url,
        symfony(&url, &unique("sf"), SymfonySerializer::Json, "INV-48").await,
    )
    .await;
}

#[tokio::test]
async fn a_real_symfony_failure_reads_from_its_php_serialized_body() {
    let url = amqp_url();
    let produced = symfony(&url, &unique("sf"), SymfonySerializer::Php, "INV-49").await;
    let (taken, f) = taken_and_read(&url, &produced).await;
    assert!(f.problems[0].contains("PHP-serialized"), "{:?}", f.problems);
    // A Node.js consumer of the queue that failed gets the body as Symfony wrote it.
    republish(&url, &taken, &f).await;
    let seen = take_with_amqplib(&url, &produced.lands_in).await;
    assert_eq!(
        seen["body"].as_str().map(str::as_bytes),
        Some(taken.body.as_slice())
    );
    produced.cleanup(&url).await;
}

#[tokio::test]
async fn a_node_consumer_sees_no_failure_headers_after_a_republish() {
    let url = amqp_url();
    let produced = nservicebus(&url, &unique("nsbjs"), "50").await;
    let (taken, f) = taken_and_read(&url, &produced).await;
    republish(&url, &taken, &f).await;
    let seen = take_with_amqplib(&url, &produced.lands_in).await;
    let headers = seen["headers"].as_object().unwrap();
    for h in &produced.failure_headers {
        assert!(!headers.contains_key(h), "{h}: {seen}");
    }
    assert_eq!(
        headers["NServiceBus.MessageId"],
        "5b0c3a8e-0a63-4a5b-9f39-b1e800c2a1f3"
    );
    assert_eq!(seen["properties"]["type"], "Shop.Messages.PlaceOrder");
    produced.cleanup(&url).await;
}
