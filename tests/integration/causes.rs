//! Stack traces printed by the real runtimes (a Java program throwing a chained exception,
//! Python's chained traceback, Node's `cause`): the cause Lazarus derives names the root
//! exception, its message and template, and the application's own top frame.

use std::process::Command;

use lazarus::message::cause::{Cause, Runtime};

/// Runs a program and returns what it printed on standard error (it fails, by design).
fn stderr_of(command: &mut Command) -> String {
    let out = command.output().expect("the runtime runs");
    assert!(!out.status.success(), "the program was meant to fail");
    String::from_utf8(out.stderr).unwrap()
}

fn program(name: &str, source: &str) -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(name);
    std::fs::write(&path, source).unwrap();
    (dir, path)
}

#[test]
fn a_java_chain_names_its_root_cause() {
    let (_dir, path) = program("Billing.java", include_str!("causes/Billing.java"));
    let traces: Vec<String> = ["C-1007", "C-1017"]
        .iter()
        .map(|id| stderr_of(Command::new("java").arg(&path).arg(id)))
        .collect();
    assert!(traces[0].contains("Caused by: "), "{}", traces[0]);
    let causes: Vec<Cause> = traces.iter().map(|t| Cause::from_text(t)).collect();
    let cause = &causes[0];
    assert_eq!(cause.runtime, Some(Runtime::Java));
    assert_eq!(
        cause.error_type.as_deref(),
        Some("com.acme.billing.Billing$CustomerNotFoundException"),
        "{}",
        traces[0]
    );
    assert_eq!(cause.message, "no customer with id C-1007");
    let frame = cause.frame.as_deref().unwrap_or_default();
    assert!(
        frame.starts_with("com.acme.billing.Billing.load("),
        "{frame}"
    );
    assert_eq!(causes[0].signature(), causes[1].signature());
}

#[test]
fn a_python_chain_names_the_exception_it_was_raised_from() {
    let (_dir, path) = program("worker.py", include_str!("causes/worker.py"));
    let trace = stderr_of(Command::new("python3").arg(&path).arg("INV-2026-00042"));
    assert!(trace.contains("direct cause"), "{trace}");
    let cause = Cause::from_text(&trace);
    assert_eq!(cause.runtime, Some(Runtime::Python));
    assert_eq!(cause.error_type.as_deref(), Some("KeyError"), "{trace}");
    assert_eq!(cause.message, "'vat_id'");
    let frame = cause.frame.as_deref().unwrap_or_default();
    assert!(
        frame.contains("worker.py") && frame.ends_with("in tax_of"),
        "{frame}"
    );
}

#[test]
fn a_node_error_names_its_cause() {
    let (_dir, path) = program("consumer.js", include_str!("causes/consumer.js"));
    let trace = stderr_of(Command::new("node").arg(&path).arg("ORD-77"));
    assert!(trace.contains("[cause]"), "{trace}");
    let cause = Cause::from_text(&trace);
    assert_eq!(cause.runtime, Some(Runtime::Node));
    assert_eq!(cause.error_type.as_deref(), Some("TypeError"), "{trace}");
    assert!(
        cause.message.contains("reading 'amount'"),
        "{}",
        cause.message
    );
    let frame = cause.frame.as_deref().unwrap_or_default();
    assert!(
        frame.starts_with("amountOf (") && frame.contains("consumer.js"),
        "{frame}"
    );
}
