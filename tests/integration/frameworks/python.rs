//! Dramatiq, run for real (PyPI's dramatiq 2.2.1 with pika 1.4.4, installed when missing as
//! `scripts/test` installs them): an actor fails with a chained exception, its one retry fails
//! too, and the broker dead-letters the message into `<queue>.XQ`.

use lazarus::message::conventions::Convention;

use super::{script, Produced};

const INSTALL: [&str; 7] = [
    "-m",
    "pip",
    "install",
    "--quiet",
    "--root-user-action=ignore",
    "dramatiq==2.2.1",
    "pika==1.4.4",
];

/// Installs Dramatiq and pika unless Python already has them.
async fn ensure_dramatiq() {
    let has = tokio::process::Command::new("python3")
        .args(["-c", "import dramatiq, pika"])
        .output()
        .await;
    if has.is_ok_and(|o| o.status.success()) {
        return;
    }
    let out = tokio::process::Command::new("python3")
        .args(INSTALL)
        .output()
        .await
        .expect("python3 runs");
    assert!(
        out.status.success(),
        "pip install dramatiq pika: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A Dramatiq worker's actor `bill_order` on `{p}.bill` that fails on `order` (a `KeyError`
/// re-raised as `TaxError ... from e`): its message ends in `{p}.bill.XQ`, with the broker's
/// `x-death` and the previous attempt's traceback in its body.
pub async fn dramatiq(url: &str, p: &str, order: &str) -> Produced {
    ensure_dramatiq().await;
    let queue = format!("{p}.bill");
    let out = tokio::process::Command::new("python3")
        .arg(script("dramatiq_worker.py"))
        .args([url, &queue, order])
        .output()
        .await
        .expect("python3 runs");
    assert!(
        out.status.success(),
        "the Dramatiq worker: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Produced {
        convention: Convention::Dramatiq,
        dlq: format!("{queue}.XQ"),
        lands_in: queue.clone(),
        target: None,
        failed_queue: Some(queue.clone()),
        message_type: Some("bill_order".into()),
        error_type: None,
        message: format!("order {order} could not be taxed"),
        // A chain's root, `raise ... from e`'s e, names the bug.
        root_type: "KeyError".into(),
        failure_headers: vec![],
        kept_headers: vec![],
        queues: vec![queue.clone(), format!("{queue}.DQ"), format!("{queue}.XQ")],
        exchanges: vec![],
    }
}
