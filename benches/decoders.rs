//! Decoder benchmark (issue 34): Lazarus' own MessagePack, CBOR and protobuf decoders
//! (`structured::to_json`, JSON text written within a budget) against the ecosystem's crates
//! as an adopter would use them — `rmpv`, `ciborium`, `prost-reflect`: decode to the crate's
//! value tree with the depth bound it offers, then `serde_json` to text — and, for MessagePack
//! and CBOR, the best wrapper those crates allow: their serde deserializers (`rmp-serde`,
//! ciborium's) streamed through `serde-transcode` into a writer that stops at the budget, no
//! tree. Inputs: an ordinary ~4 KiB invoice (protobuf: the integration tests' `shop.proto`
//! `OrderFailed`), and hostile bodies: 16 MiB of one-byte values, nesting 100,000 deep, a
//! length prefix claiming 4 GiB; for CBOR also 21 bytes nested 20 deep and cut short.
//!
//! Each measurement runs in a child process of its own (this executable again, `--case`), so
//! that each peak is its own and a crash would be a row, not the end of the bench. A counting
//! global allocator gives the peak of live heap bytes over what the input and schema already
//! held, and the total bytes allocated (a realloc counts its new size, and holds old and new
//! for a moment, as a moving one does); the time is wall time, the median of the runs, which
//! take turns (ours, the crate, the wrapper; again).
//!
//! `cargo bench --bench decoders --features decoder-crates`. Env: BENCH_RUNS=5,
//! BENCH_CHILD_MEMORY=6442450944 (each child's address-space cap: past it an allocation fails and the child aborts, a row
//! "CRASHED"), BENCH_BUDGET=8388608 (the JSON budget
//! of ours and of the streamed wrapper: `masking::MAX_MASKED_BODY`, the largest production
//! passes; ingest passes 64 KiB, or 1 MiB with business fields, the message page 256 KiB).
//! Protobuf rows need `protoc` (Debian's protobuf-compiler), as the integration tests do.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::RefCell;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::time::Instant;

use lazarus::message::structured::{protobuf::Schemas, to_json, DecodeError, Format, MAX_DEPTH};

mod common;
use common::{env_or, median};

struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);
static TOTAL: AtomicUsize = AtomicUsize::new(0);

fn grew(n: usize) {
    TOTAL.fetch_add(n, Relaxed);
    let live = LIVE.fetch_add(n, Relaxed) + n;
    PEAK.fetch_max(live, Relaxed);
}

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = System.alloc(layout);
        if !p.is_null() {
            grew(layout.size());
        }
        p
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let p = System.alloc_zeroed(layout);
        if !p.is_null() {
            grew(layout.size());
        }
        p
    }
    unsafe fn dealloc(&self, p: *mut u8, layout: Layout) {
        System.dealloc(p, layout);
        LIVE.fetch_sub(layout.size(), Relaxed);
    }
    unsafe fn realloc(&self, p: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let q = System.realloc(p, layout, new_size);
        if !q.is_null() {
            grew(new_size);
            LIVE.fetch_sub(layout.size(), Relaxed);
        }
        q
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// How a decode ended.
#[derive(Debug, Clone)]
enum Outcome {
    /// The whole JSON, this long.
    Complete(usize),
    /// Stopped at the budget, with this much of the JSON's start.
    Cut(usize),
    /// Refused, with the decoder's reason.
    Refused(String),
}

impl Outcome {
    fn line(&self) -> String {
        match self {
            Outcome::Complete(n) => format!("complete {n}"),
            Outcome::Cut(n) => format!("cut {n}"),
            Outcome::Refused(why) => format!("refused {}", why.replace('\n', " ")),
        }
    }

    fn parse(line: &str) -> Outcome {
        let (kind, rest) = line.split_once(' ').unwrap_or((line, ""));
        match kind {
            "complete" => Outcome::Complete(rest.parse().unwrap()),
            "cut" => Outcome::Cut(rest.parse().unwrap()),
            _ => Outcome::Refused(rest.to_owned()),
        }
    }

    fn text(&self) -> String {
        match self {
            Outcome::Complete(n) => format!("complete, {}", bytes(*n)),
            Outcome::Cut(n) => format!("cut at budget, {} kept", bytes(*n)),
            Outcome::Refused(why) => {
                let why: String = why.chars().take(48).collect();
                format!("refused: {why}")
            }
        }
    }
}

/// The three ways of decoding measured.
const IMPLS: [&str; 3] = ["ours", "crate", "stream"];

/// What a format's implementations are called in the table.
fn impl_name(format: &str, imp: &str) -> &'static str {
    match (format, imp) {
        (_, "ours") => "Lazarus to_json",
        ("msgpack", "crate") => "rmpv Value + serde_json",
        ("msgpack", _) => "rmp-serde transcode, bounded",
        ("cbor", "crate") => "ciborium Value + serde_json",
        ("cbor", _) => "ciborium transcode, bounded",
        (_, _) => "prost-reflect DynamicMessage + serde_json",
    }
}

// ---------------------------------------------------------------------------------------
// The child: one decode, measured.

/// A writer of at most `limit` bytes: past it, writing fails (the streamed wrapper's budget).
struct Bounded {
    buf: Vec<u8>,
    limit: usize,
    full: bool,
}

impl std::io::Write for Bounded {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        if self.buf.len() + b.len() > self.limit {
            self.full = true;
            return Err(std::io::Error::other("over the budget"));
        }
        self.buf.extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn bounded_outcome(result: Result<(), String>, ser: serde_json::Serializer<Bounded>) -> Outcome {
    let out = ser.into_inner();
    match result {
        Ok(()) => Outcome::Complete(out.buf.len()),
        Err(_) if out.full => Outcome::Cut(out.buf.len()),
        Err(e) => Outcome::Refused(e),
    }
}

thread_local! {
    /// Where [`Transcoded`] writes: ciborium 0.2 has no public deserializer to hand
    /// serde-transcode, only `from_reader::<T>`, so `T` transcodes into this.
    static SINK: RefCell<Option<serde_json::Serializer<Bounded>>> = const { RefCell::new(None) };
}

struct Transcoded;

impl<'de> serde::Deserialize<'de> for Transcoded {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        SINK.with(|sink| {
            let mut sink = sink.borrow_mut();
            let ser = sink.as_mut().expect("a sink");
            serde_transcode::transcode(d, ser).map_err(<D::Error as serde::de::Error>::custom)
        })?;
        Ok(Transcoded)
    }
}

/// The message type the protobuf inputs are read as, from their file name.
fn message_of(input: &Path) -> &'static str {
    match input.to_string_lossy().contains("ordinary") {
        true => "shop.v1.OrderFailed",
        false => "shop.v1.Node",
    }
}

/// What one case needs before the clock starts: the schema, in each implementation's form.
enum Schema {
    None,
    Ours(Schemas, &'static str),
    Crate(prost_reflect::MessageDescriptor),
}

fn decode(format: &str, imp: &str, bytes: &[u8], budget: usize, schema: &Schema) -> Outcome {
    let refused = |e: &dyn std::fmt::Display| Outcome::Refused(e.to_string());
    match (imp, format) {
        ("ours", _) => {
            let format = match (format, schema) {
                ("msgpack", _) => Format::MessagePack,
                ("cbor", _) => Format::Cbor,
                (_, Schema::Ours(schemas, name)) => Format::Protobuf(schemas, name),
                _ => unreachable!(),
            };
            match to_json(bytes, format, budget) {
                Ok(text) => Outcome::Complete(text.len()),
                Err(DecodeError::TooLarge { start, .. }) => Outcome::Cut(start.len()),
                Err(e @ DecodeError::Invalid { .. }) => Outcome::Refused(e.to_string()),
            }
        }
        ("crate", "msgpack") => {
            let mut rd = bytes;
            match rmpv::decode::read_value_with_max_depth(&mut rd, MAX_DEPTH) {
                Ok(value) => match serde_json::to_string(&value) {
                    Ok(text) => Outcome::Complete(text.len()),
                    Err(e) => refused(&e),
                },
                Err(e) => refused(&e),
            }
        }
        ("crate", "cbor") => {
            match ciborium::de::from_reader_with_recursion_limit::<ciborium::Value, _>(
                bytes, MAX_DEPTH,
            ) {
                Ok(value) => match serde_json::to_string(&value) {
                    Ok(text) => Outcome::Complete(text.len()),
                    Err(e) => refused(&e),
                },
                Err(e) => refused(&e),
            }
        }
        ("crate", _) => {
            let Schema::Crate(desc) = schema else {
                unreachable!()
            };
            match prost_reflect::DynamicMessage::decode(desc.clone(), bytes) {
                Ok(message) => match serde_json::to_string(&message) {
                    Ok(text) => Outcome::Complete(text.len()),
                    Err(e) => refused(&e),
                },
                Err(e) => refused(&e),
            }
        }
        (_, "msgpack") => {
            let mut de = rmp_serde::Deserializer::from_read_ref(bytes);
            de.set_max_depth(MAX_DEPTH);
            let mut ser = serde_json::Serializer::new(Bounded {
                buf: Vec::new(),
                limit: budget,
                full: false,
            });
            let result = serde_transcode::transcode(&mut de, &mut ser).map_err(|e| e.to_string());
            bounded_outcome(result, ser)
        }
        (_, "cbor") => {
            SINK.with(|sink| {
                *sink.borrow_mut() = Some(serde_json::Serializer::new(Bounded {
                    buf: Vec::new(),
                    limit: budget,
                    full: false,
                }))
            });
            let result =
                ciborium::de::from_reader_with_recursion_limit::<Transcoded, _>(bytes, MAX_DEPTH)
                    .map(|_| ())
                    .map_err(|e| e.to_string());
            let ser = SINK.with(|sink| sink.borrow_mut().take().expect("the sink"));
            bounded_outcome(result, ser)
        }
        _ => unreachable!("protobuf has no streamed wrapper"),
    }
}

/// `--case FORMAT IMPL INPUT BUDGET [SET]`: one decode measured, printed as `RESULT peak total
/// nanos outcome`.
fn child(args: &[String]) {
    let [format, imp, input, budget, rest @ ..] = args else {
        panic!("--case FORMAT IMPL INPUT BUDGET [SET]")
    };
    // A decoder whose memory runs away aborts at this cap (a refused allocation) instead of
    // calling the OOM killer onto a shared machine.
    let cap = env_or("BENCH_CHILD_MEMORY", 6 << 30) as u64;
    use rustix::process::{setrlimit, Resource, Rlimit};
    setrlimit(
        Resource::As,
        Rlimit {
            current: Some(cap),
            maximum: Some(cap),
        },
    )
    .unwrap();
    let bytes = std::fs::read(input).unwrap();
    let budget: usize = budget.parse().unwrap();
    let schema = match (imp.as_str(), rest.first()) {
        ("ours", Some(set)) => Schema::Ours(
            Schemas::load(
                &[("shop.pb".into(), std::fs::read(set).unwrap())],
                &[],
                None,
            )
            .unwrap(),
            message_of(Path::new(input)),
        ),
        ("crate", Some(set)) => {
            let pool =
                prost_reflect::DescriptorPool::decode(std::fs::read(set).unwrap().as_slice())
                    .unwrap();
            Schema::Crate(
                pool.get_message_by_name(message_of(Path::new(input)))
                    .unwrap(),
            )
        }
        _ => Schema::None,
    };
    // The input and the schema are held already: count from here.
    let base = LIVE.load(Relaxed);
    PEAK.store(base, Relaxed);
    TOTAL.store(0, Relaxed);
    let start = Instant::now();
    let outcome = decode(format, imp, &bytes, budget, &schema);
    let mut nanos = start.elapsed().as_nanos() as f64;
    let (peak, total) = (PEAK.load(Relaxed) - base, TOTAL.load(Relaxed));
    // A small body decodes in microseconds: time many, for a time the clock can tell.
    let reps = ((256 << 10) / bytes.len().max(1)).clamp(1, 1000);
    if reps > 1 {
        let start = Instant::now();
        for _ in 0..reps {
            std::hint::black_box(decode(format, imp, &bytes, budget, &schema));
        }
        nanos = start.elapsed().as_nanos() as f64 / reps as f64;
    }
    println!("RESULT {peak} {total} {nanos} {}", outcome.line());
}

/// The JSON text each way writes for `bytes` (or its error), for the fidelity table.
fn shown(format: &str, imp: &str, bytes: &[u8]) -> String {
    let text = |r: Result<String, String>| r.unwrap_or_else(|e| format!("error: {e}"));
    let bounded = || {
        serde_json::Serializer::new(Bounded {
            buf: Vec::new(),
            limit: 1 << 20,
            full: false,
        })
    };
    let streamed = |r: Result<(), String>, ser: serde_json::Serializer<Bounded>| {
        text(r.map(|()| String::from_utf8_lossy(&ser.into_inner().buf).into_owned()))
    };
    match (imp, format) {
        ("ours", f) => {
            let f = match f {
                "msgpack" => Format::MessagePack,
                _ => Format::Cbor,
            };
            text(to_json(bytes, f, 1 << 20).map_err(|e| e.to_string()))
        }
        ("crate", "msgpack") => text(
            rmpv::decode::read_value_with_max_depth(&mut &bytes[..], MAX_DEPTH)
                .map_err(|e| e.to_string())
                .and_then(|v| serde_json::to_string(&v).map_err(|e| e.to_string())),
        ),
        ("crate", _) => text(
            ciborium::de::from_reader_with_recursion_limit::<ciborium::Value, _>(bytes, MAX_DEPTH)
                .map_err(|e| e.to_string())
                .and_then(|v| serde_json::to_string(&v).map_err(|e| e.to_string())),
        ),
        (_, "msgpack") => {
            let mut de = rmp_serde::Deserializer::from_read_ref(bytes);
            let mut ser = bounded();
            let r = serde_transcode::transcode(&mut de, &mut ser).map_err(|e| e.to_string());
            streamed(r, ser)
        }
        (_, _) => {
            SINK.with(|sink| *sink.borrow_mut() = Some(bounded()));
            let r = ciborium::de::from_reader::<Transcoded, _>(bytes)
                .map(|_| ())
                .map_err(|e| e.to_string());
            streamed(r, SINK.with(|sink| sink.borrow_mut().take().unwrap()))
        }
    }
}

/// Values that Lazarus writes its own way (binaries as hex, extension types, tags, keys
/// that are not text, text that is not UTF-8): what each way makes of them.
fn fidelity() {
    let samples: [(&str, &str, &[u8]); 10] = [
        ("msgpack", "bin 0xdead", &[0xc4, 0x02, 0xde, 0xad]),
        ("msgpack", "ext type 5", &[0xd4, 0x05, 0x07]),
        ("msgpack", "{1: true}", &[0x81, 0x01, 0xc3]),
        ("msgpack", "{[1]: true}", &[0x81, 0x91, 0x01, 0xc3]),
        ("msgpack", "str, not UTF-8", &[0xa2, b'a', 0xff]),
        ("cbor", "bytes 0xdead", &[0x42, 0xde, 0xad]),
        (
            "cbor",
            "tag 1 (epoch time)",
            &[0xc1, 0x1a, 0x6b, 0x49, 0xd2, 0x00],
        ),
        ("cbor", "{1: true}", &[0xa1, 0x01, 0xf5]),
        ("cbor", "{[1]: true}", &[0xa1, 0x81, 0x01, 0xf5]),
        ("cbor", "text, not UTF-8", &[0x62, b'a', 0xff]),
    ];
    println!();
    println!("| format | value | Lazarus | crate value + serde_json | streamed wrapper |");
    println!("|---|---|---|---|---|");
    for (format, what, bytes) in samples {
        let cell = |imp| {
            let s: String = shown(format, imp, bytes).chars().take(44).collect();
            s.replace('|', "\\|")
        };
        println!(
            "| {format} | {what} | `{}` | `{}` | `{}` |",
            cell("ours"),
            cell("crate"),
            cell("stream")
        );
    }
}

// ---------------------------------------------------------------------------------------
// The inputs.

/// An invoice as a JSON value: customer, 12 lines with tags, totals — about 4 KiB in
/// MessagePack and CBOR.
fn invoice() -> serde_json::Value {
    let lines: Vec<serde_json::Value> = (0..12)
        .map(|i| {
            serde_json::json!({
                "line": i + 1,
                "sku": format!("SKU-{:05}", 17 * i + 3),
                "description": format!("Widget type {i}, anodised blue, 40 mm, pack of 12"),
                "quantity": i % 5 + 1,
                "unit_cents": 1299 + 100 * i,
                "tax_rate": 0.19,
                "discount": if i % 3 == 0 { serde_json::Value::Null } else { serde_json::json!(0.05) },
                "tags": ["hardware", "blue", format!("batch-{}", 2026 + i)],
                "warehouse": {"site": "DE-BER-2", "bin": format!("A{:02}-{:02}", i, i * 3)},
            })
        })
        .collect();
    serde_json::json!({
        "invoice_id": "INV-2026-000042",
        "issued_at": "2026-12-04T10:15:00Z",
        "due_at": "2027-01-03T00:00:00Z",
        "currency": "EUR",
        "paid": false,
        "customer": {
            "id": "c-977",
            "name": "Mueller Werkzeuge GmbH",
            "email": "accounts@mueller-werkzeuge.example",
            "vat_id": "DE123456789",
            "address": {"street": "Invalidenstrasse 117", "city": "Berlin", "postcode": "10115", "country": "DE"},
        },
        "lines": lines,
        "totals": {"net_cents": 173_880, "tax_cents": 33_037, "gross_cents": 206_917},
        "notes": null,
    })
}

/// `shop.proto` as the integration tests write it (tests/integration/producers.rs), with one
/// bench-only message appended: `Node`, for a packed repeated field and nesting.
fn shop_proto() -> String {
    let tests = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/integration/producers.rs"
    ))
    .unwrap();
    let start = tests.find("const SHOP_PROTO: &str = r#\"").unwrap() + 28;
    let end = start + tests[start..].find("\"#;").unwrap();
    format!(
        "{}\nmessage Node {{\n  repeated int32 values = 1;\n  repeated Node children = 2;\n}}\n",
        &tests[start..end]
    )
}

/// An `OrderFailed` of about 4 KiB, in protobuf's text format.
fn order_text() -> String {
    let mut t = String::from(
        r#"order_id: "ORD-2026-000042" amount_cents: 206917
        customer { email: "accounts@mueller-werkzeuge.example" name: "Mueller Werkzeuge GmbH" }
        reason: CARD_DECLINED failed_at { seconds: 1796342400 nanos: 500000000 } "#,
    );
    for i in 0..36 {
        t += &format!(
            r#"tags: "line-{i:02}:SKU-{:05}:hardware:blue" "#,
            17 * i + 3
        );
    }
    for i in 0..36 {
        t += &format!(
            r#"labels {{ key: "line-{i:02}" value: "Widget type {i}, anodised blue, 40 mm x {}" }} "#,
            i % 5 + 1
        );
    }
    t
}

fn protoc(dir: &Path, args: &[&str], input: &str) -> Option<Vec<u8>> {
    let mut child = Command::new("protoc")
        .current_dir(dir)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .ok()?;
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
    Some(out.stdout)
}

fn varint(out: &mut Vec<u8>, mut n: u64) {
    while n >= 0x80 {
        out.push((n as u8) | 0x80);
        n >>= 7;
    }
    out.push(n as u8);
}

const SIXTEEN_MIB: usize = 16 << 20;
const DEEP: usize = 100_000;

/// The inputs of each format: (name, bytes).
fn inputs(format: &str, ordinary_protobuf: Option<Vec<u8>>) -> Vec<(&'static str, Vec<u8>)> {
    match format {
        "msgpack" => {
            let ordinary = rmp_serde::to_vec_named(&invoice()).unwrap();
            // An array32 of nils filling 16 MiB.
            let n = SIXTEEN_MIB - 5;
            let mut ones = vec![0xdd];
            ones.extend((n as u32).to_be_bytes());
            ones.resize(SIXTEEN_MIB, 0xc0);
            let mut deep = vec![0x91; DEEP];
            deep.push(0xc0);
            // A str32 claiming 4 GiB - 1, with 3 bytes.
            let huge = [&[0xdb, 0xff, 0xff, 0xff, 0xff][..], b"abc"].concat();
            vec![
                ("ordinary", ordinary),
                ("16MiB-ones", ones),
                ("deep-100k", deep),
                ("4GiB-prefix", huge),
            ]
        }
        "cbor" => {
            let mut ordinary = Vec::new();
            ciborium::into_writer(&invoice(), &mut ordinary).unwrap();
            let n = SIXTEEN_MIB - 5;
            let mut ones = vec![0x9a];
            ones.extend((n as u32).to_be_bytes());
            ones.resize(SIXTEEN_MIB, 0xf6);
            let mut deep = vec![0x81; DEEP];
            deep.push(0xf6);
            // A byte string claiming 4 GiB, with 3 bytes.
            let huge = [&[0x5b, 0, 0, 0, 1, 0, 0, 0, 0][..], b"abc"].concat();
            // 20 arrays of one, the last one's item missing: within every depth bound.
            let cut = vec![0x81; 21];
            vec![
                ("ordinary", ordinary),
                ("16MiB-ones", ones),
                ("deep-100k", deep),
                ("deep-20-cut", cut),
                ("4GiB-prefix", huge),
            ]
        }
        _ => {
            let mut out = Vec::new();
            if let Some(ordinary) = ordinary_protobuf {
                out.push(("ordinary", ordinary));
            }
            // Node.values, packed: one-byte varints filling 16 MiB.
            let mut ones = vec![0x0a];
            varint(&mut ones, (SIXTEEN_MIB - 5) as u64);
            ones.resize(SIXTEEN_MIB, 0x01);
            // Node.children nested DEEP levels: each level's length, inside out.
            let mut lengths = vec![0u64];
            for k in 0..DEEP {
                let inner = lengths[k];
                let mut v = Vec::new();
                varint(&mut v, inner);
                lengths.push(1 + v.len() as u64 + inner);
            }
            let mut deep = Vec::with_capacity(lengths[DEEP] as usize);
            for k in (0..DEEP).rev() {
                deep.push(0x12);
                varint(&mut deep, lengths[k]);
            }
            // Node.children claiming 4 GiB, with 3 bytes.
            let mut huge = vec![0x12];
            varint(&mut huge, 1 << 32);
            huge.extend(b"abc");
            out.extend([
                ("16MiB-ones", ones),
                ("deep-100k", deep),
                ("4GiB-prefix", huge),
            ]);
            out
        }
    }
}

// ---------------------------------------------------------------------------------------
// The parent: inputs written, children run in turns, the table.

struct Figures {
    peak: Vec<f64>,
    total: Vec<f64>,
    nanos: Vec<f64>,
    outcome: Option<Outcome>,
}

fn bytes(n: usize) -> String {
    match n {
        n if n >= 10 << 20 => format!("{:.0} MiB", n as f64 / (1 << 20) as f64),
        n if n >= 1 << 20 => format!("{:.1} MiB", n as f64 / (1 << 20) as f64),
        n if n >= 10 << 10 => format!("{:.0} KiB", n as f64 / 1024.0),
        n if n >= 1 << 10 => format!("{:.1} KiB", n as f64 / 1024.0),
        n => format!("{n} B"),
    }
}

fn time(nanos: f64) -> String {
    match nanos {
        n if n >= 1e9 => format!("{:.2} s", n / 1e9),
        n if n >= 1e6 => format!("{:.1} ms", n / 1e6),
        n if n >= 1e3 => format!("{:.1} µs", n / 1e3),
        n => format!("{n:.0} ns"),
    }
}

fn ratio(theirs: f64, ours: f64) -> String {
    match theirs / ours {
        r if !r.is_finite() => "–".into(),
        r if r < 0.1 => format!("{r:.2}×"),
        r if r >= 100.0 => format!("{r:.0}×"),
        r => format!("{r:.1}×"),
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let Some(at) = args.iter().position(|a| a == "--case") {
        return child(&args[at + 1..]);
    }
    let runs = env_or("BENCH_RUNS", 5);
    let budget = env_or("BENCH_BUDGET", lazarus::message::masking::MAX_MASKED_BODY);
    let dir = PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/target/bench/decoders"
    ));
    std::fs::create_dir_all(&dir).unwrap();

    std::fs::write(dir.join("shop.proto"), shop_proto()).unwrap();
    let set = protoc(
        &dir,
        &[
            "--include_imports",
            "--descriptor_set_out=shop.pb",
            "shop.proto",
        ],
        "",
    );
    let ordinary_protobuf = set.as_ref().and_then(|_| {
        protoc(
            &dir,
            &["--encode=shop.v1.OrderFailed", "shop.proto"],
            &order_text(),
        )
    });
    let mut formats = vec!["msgpack", "cbor"];
    match set {
        Some(_) => formats.push("protobuf"),
        None => println!("no protoc on the PATH: protobuf rows left out"),
    }

    // (format, input, path, size, figures per implementation)
    let mut cases = Vec::new();
    for format in &formats {
        let ordinary = (*format == "protobuf").then(|| ordinary_protobuf.clone().unwrap());
        for (name, bytes) in inputs(format, ordinary) {
            let path = dir.join(format!("{format}-{name}.bin"));
            std::fs::write(&path, &bytes).unwrap();
            let imps: Vec<&str> = IMPLS
                .iter()
                .copied()
                .filter(|imp| *format != "protobuf" || *imp != "stream")
                .collect();
            let figures: Vec<Figures> = imps
                .iter()
                .map(|_| Figures {
                    peak: vec![],
                    total: vec![],
                    nanos: vec![],
                    outcome: None,
                })
                .collect();
            cases.push((*format, name, path, bytes.len(), imps, figures));
        }
    }

    let exe = std::env::current_exe().unwrap();
    let set_path = dir.join("shop.pb");
    for run in 0..runs {
        eprintln!("run {}/{runs}", run + 1);
        for (format, _, path, _, imps, figures) in &mut cases {
            for (imp, fig) in imps.iter().zip(figures.iter_mut()) {
                let mut cmd = Command::new(&exe);
                cmd.arg("--case")
                    .arg(*format)
                    .arg(imp)
                    .arg(&*path)
                    .arg(budget.to_string());
                if *format == "protobuf" {
                    cmd.arg(&set_path);
                }
                let out = cmd
                    .env("RUST_BACKTRACE", "0")
                    .stderr(Stdio::piped())
                    .output()
                    .unwrap();
                let stdout = String::from_utf8_lossy(&out.stdout);
                let Some(line) = stdout.lines().find_map(|l| l.strip_prefix("RESULT ")) else {
                    let stderr = String::from_utf8_lossy(&out.stderr);
                    let why = stderr
                        .lines()
                        .find(|l| l.contains("memory allocation"))
                        .or(stderr.lines().last())
                        .unwrap_or("")
                        .to_owned();
                    fig.outcome = Some(Outcome::Refused(format!("CRASHED ({}) {why}", out.status)));
                    continue;
                };
                let mut parts = line.splitn(4, ' ');
                let mut num = || parts.next().unwrap().parse::<f64>().unwrap();
                let (peak, total, nanos) = (num(), num(), num());
                fig.peak.push(peak);
                fig.total.push(total);
                fig.nanos.push(nanos);
                fig.outcome = Some(Outcome::parse(parts.next().unwrap()));
            }
        }
    }

    let load = Command::new("uptime")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_default();
    println!();
    println!(
        "decoders: {runs} runs each (medians), JSON budget {} for ours and the streamed wrapper; {load}",
        bytes(budget)
    );
    println!();
    println!("| format | input | decoder | peak heap | × ours | allocated | × ours | time | × ours | output |");
    println!("|---|---|---|---|---|---|---|---|---|---|");
    for (format, name, _, size, imps, figures) in &cases {
        let med = |v: &Vec<f64>| match v.is_empty() {
            true => f64::NAN,
            false => median(v.clone()),
        };
        let ours = &figures[0];
        let (op, ot, on) = (med(&ours.peak), med(&ours.total), med(&ours.nanos));
        for (imp, fig) in imps.iter().zip(figures) {
            let (p, t, n) = (med(&fig.peak), med(&fig.total), med(&fig.nanos));
            let outcome = fig.outcome.as_ref().map(Outcome::text).unwrap_or_default();
            let (rp, rt, rn) = match *imp {
                "ours" => ("".into(), "".into(), "".into()),
                _ => (ratio(p, op), ratio(t, ot), ratio(n, on)),
            };
            let fmt_or = |x: f64, f: &dyn Fn(f64) -> String| match x.is_nan() {
                true => "–".to_owned(),
                false => f(x),
            };
            println!(
                "| {format} | {name} ({}) | {} | {} | {rp} | {} | {rt} | {} | {rn} | {outcome} |",
                bytes(*size),
                impl_name(format, imp),
                fmt_or(p, &|x| bytes(x as usize)),
                fmt_or(t, &|x| bytes(x as usize)),
                fmt_or(n, &time),
            );
        }
    }
    fidelity();
}
