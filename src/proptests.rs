//! Property tests: whatever a broker or a user sends — any header table, any frame bytes,
//! any `x-death` shape, any search text, any body bytes (MessagePack and CBOR included) —
//! decoding never panics, and the typed header form and the wire encoding round-trip
//! losslessly.

use proptest::collection::vec;
use proptest::prelude::*;

use crate::message::codec::{decode_content_header, decode_table, Writer};
use crate::message::headers::{AmqpValue, Bytes, JsonFloat, Table};

/// Entries with names as a broker may send them: text, bytes, repeated.
fn table_of(
    names: impl Strategy<Value = Vec<u8>>,
    values: impl Strategy<Value = AmqpValue>,
    size: std::ops::Range<usize>,
) -> impl Strategy<Value = Table> {
    vec((names.prop_map(Bytes), values), size).prop_map(|entries| entries.into_iter().collect())
}

fn name() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        "[a-z-]{1,12}".prop_map(String::into_bytes),
        vec(any::<u8>(), 0..8),
    ]
}

fn value() -> impl Strategy<Value = AmqpValue> {
    let leaf = prop_oneof![
        any::<bool>().prop_map(AmqpValue::Boolean),
        any::<i8>().prop_map(AmqpValue::ShortShortInt),
        any::<u8>().prop_map(AmqpValue::ShortShortUint),
        any::<i16>().prop_map(AmqpValue::ShortInt),
        any::<u16>().prop_map(AmqpValue::ShortUint),
        any::<i32>().prop_map(AmqpValue::LongInt),
        any::<u32>().prop_map(AmqpValue::LongUint),
        any::<i64>().prop_map(AmqpValue::LongLongInt),
        any::<f32>().prop_map(|f| AmqpValue::Float(JsonFloat(f))),
        any::<f64>().prop_map(|f| AmqpValue::Double(JsonFloat(f))),
        (any::<u8>(), any::<u32>()).prop_map(|(scale, value)| AmqpValue::Decimal { scale, value }),
        vec(any::<u8>(), 0..20).prop_map(|b| AmqpValue::Encoded({
            // An encoded value is what the wire held: here, a long string.
            let mut out = vec![b'S'];
            out.put_long_string(&b).unwrap();
            out
        })),
        vec(any::<u8>(), 0..40).prop_map(|b| AmqpValue::LongString(Bytes(b))),
        "[a-zA-Z0-9 .:-]{0,30}".prop_map(|s| AmqpValue::LongString(Bytes(s.into_bytes()))),
        any::<u64>().prop_map(AmqpValue::Timestamp),
        vec(any::<u8>(), 0..20).prop_map(|b| AmqpValue::ByteArray(Bytes(b))),
        Just(AmqpValue::Void),
    ];
    leaf.prop_recursive(3, 48, 6, |inner| {
        prop_oneof![
            vec(inner.clone(), 0..6).prop_map(AmqpValue::Array),
            table_of(name(), inner, 0..6).prop_map(AmqpValue::Table),
        ]
    })
}

/// An `x-death` entry made of the fields the broker uses, each with any type.
fn death_entry() -> impl Strategy<Value = AmqpValue> {
    let keys = prop::sample::select(vec![
        "queue",
        "reason",
        "count",
        "exchange",
        "routing-keys",
        "time",
        "original-expiration",
    ]);
    table_of(keys.prop_map(|k| k.as_bytes().to_vec()), value(), 0..8).prop_map(AmqpValue::Table)
}

fn headers() -> impl Strategy<Value = Table> {
    let death = prop_oneof![vec(death_entry(), 0..5).prop_map(AmqpValue::Array), value(),];
    (
        table_of(name(), value(), 0..6),
        proptest::option::of(death),
        proptest::option::of(value()),
        proptest::option::of(value()),
    )
        .prop_map(|(mut table, death, first_queue, first_reason)| {
            let extra = [
                ("x-death", death),
                ("x-first-death-queue", first_queue),
                ("x-first-death-reason", first_reason),
            ];
            for (k, v) in extra {
                if let Some(v) = v {
                    table.insert(k, v);
                }
            }
            table
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn any_death_headers_decode_without_panicking(table in headers()) {
        let history = crate::message::death::decode(Some(&table));
        if history.replay_target.is_some() {
            prop_assert!(history.first_death.is_some());
        }
        prop_assert!(history.deaths.len() <= 5);
    }

    #[test]
    fn typed_json_round_trips_every_value(table in table_of(name(), value(), 0..8)) {
        let json = serde_json::to_string(&table).unwrap();
        let back: Table = serde_json::from_str(&json).unwrap();
        prop_assert_eq!(back, table);
    }

    #[test]
    fn wire_tables_round_trip_byte_for_byte(table in table_of(name(), value(), 0..8)) {
        let mut bytes = Vec::new();
        bytes.put_table(&table).unwrap();
        let back = decode_table(&bytes[4..]).unwrap();
        let mut again = Vec::new();
        again.put_table(&back).unwrap();
        prop_assert_eq!(again, bytes);
    }

    #[test]
    fn any_frame_bytes_decode_or_say_why(bytes in vec(any::<u8>(), 0..200)) {
        // Whatever the bytes, an answer: decoded, or an error that says why.
        if let Err(e) = decode_table(&bytes) {
            prop_assert!(!e.to_string().trim().is_empty());
        }
        if let Err(e) = decode_content_header(&bytes) {
            prop_assert!(!e.to_string().trim().is_empty());
        }
        if let Err(e) = crate::amqp::wire::method::parse(&bytes) {
            prop_assert!(!e.to_string().trim().is_empty());
        }
    }

    #[test]
    fn any_search_text_parses_or_says_why(input in "\\PC{0,120}") {
        let fields = ["invoice".to_owned()];
        match crate::message::search::parse(&input, &fields) {
            Ok(search) => {
                if let Some(fts) = search.text_query().map(|t| t.fts5()) {
                    // Every piece is quoted: user text never becomes FTS syntax.
                    prop_assert_eq!(fts.matches('"').count() % 2, 0);
                    prop_assert!(fts.starts_with('"'));
                }
            }
            Err(e) => prop_assert!(!e.to_string().is_empty()),
        }
    }

    #[test]
    fn search_syntax_soup_never_panics(input in "[a-z:\"* \\-()^]{0,60}") {
        let _ = crate::message::search::parse(&input, &["order".to_owned()]);
    }

    #[test]
    fn any_structured_bytes_decode_within_the_budget_or_say_why(
        bytes in vec(any::<u8>(), 0..300),
        budget in 0usize..2048,
    ) {
        use crate::message::structured::{to_json, DecodeError, Format};
        let schemas = crate::message::structured::protobuf::tests::shop();
        let order = Format::Protobuf(&schemas, "shop.Order");
        for format in [Format::MessagePack, Format::Cbor, Format::Amqp10, Format::RawProtobuf, order] {
            match to_json(&bytes, format, budget) {
                // What the viewer and the index read back is JSON serde_json accepts, and
                // no longer than the budget.
                Ok(text) => {
                    prop_assert!(text.len() <= budget, "{} > {}", text.len(), budget);
                    prop_assert!(serde_json::from_str::<serde_json::Value>(&text).is_ok(), "{}", text);
                    // A larger budget writes the same.
                    prop_assert_eq!(to_json(&bytes, format, budget * 2 + 16), Ok(text));
                }
                Err(DecodeError::TooLarge { start, limit, .. }) => {
                    prop_assert_eq!(limit, budget);
                    prop_assert!(start.len() <= budget);
                    // The start is the start of what a large enough budget writes, which is
                    // longer than this one — or protobuf's, whose fields out of number order
                    // are picked out with an index the budget pays for too.
                    if let Ok(whole) = to_json(&bytes, format, 1 << 20) {
                        prop_assert!(whole.starts_with(&start), "{} / {}", start, whole);
                        let protobuf = matches!(format, Format::RawProtobuf | Format::Protobuf(..));
                        prop_assert!(whole.len() > budget || protobuf, "{} fits in {}", whole, budget);
                    }
                }
                // Said of the format it was read as.
                Err(DecodeError::Invalid { what, .. }) => prop_assert_eq!(what, format.to_string()),
            }
        }
    }

    /// One-byte values of each format, as many as fit in 300 bytes: the JSON they stand for
    /// is many times their size, and a decode writes no more of it than its budget.
    #[test]
    fn a_flood_of_tiny_values_costs_the_budget_not_the_values(
        unit in prop::sample::select(vec![
            (0usize, vec![0xc0u8]), (0, vec![0x90]), (0, vec![0x80]), (0, vec![0xa0]),
            (0, vec![0xd4, 0x01, 0x00]), (1, vec![0xf6]), (1, vec![0x80]), (1, vec![0xa0]),
            (2, vec![0x08, 0x00]), (2, vec![0x0b, 0x0c]), (2, vec![0x12, 0x00]),
        ]),
        budget in 1usize..4096,
    ) {
        use crate::message::structured::{to_json, DecodeError, Format};
        let n = 300 / unit.1.len();
        let bytes: Vec<u8> = match unit.0 {
            // A MessagePack or CBOR array of n of them; protobuf fields one after another.
            0 => [vec![0xdc, (n >> 8) as u8, n as u8], unit.1.repeat(n)].concat(),
            1 => [vec![0x99, (n >> 8) as u8, n as u8], unit.1.repeat(n)].concat(),
            _ => unit.1.repeat(n),
        };
        let format = [Format::MessagePack, Format::Cbor, Format::RawProtobuf][unit.0];
        match to_json(&bytes, format, budget) {
            Ok(text) => prop_assert!(text.len() <= budget),
            Err(DecodeError::TooLarge { start, .. }) => prop_assert!(start.len() <= budget),
            Err(e) => prop_assert!(false, "{} does not decode: {}", format, e),
        }
    }

    #[test]
    fn any_body_bytes_become_text_or_not(bytes in vec(any::<u8>(), 0..300), gzip in any::<bool>()) {
        let encoding = gzip.then_some("gzip");
        use crate::message::body::Encoding;
        let latin1 = Encoding::new(Some("text/plain; charset=latin1"), encoding);
        // Never more than the bound asked for, whatever the bytes decompress to.
        let within = |text: Option<String>| text.is_none_or(|t| t.len() <= 1024);
        prop_assert!(within(crate::message::body::text(&bytes, &latin1, 1024)));
        let deflate = Encoding::new(Some("application/json"), Some("deflate"));
        prop_assert!(within(crate::message::body::text(&bytes, &deflate, 1024)));
        for compression in ["application/x-gzip", "application/x-bz2", "application/x-lzma", "lzma", "zstd", "brotli"] {
            let kombu = Encoding::default().with_compression(Some(compression));
            prop_assert!(within(crate::message::body::text(&bytes, &kombu, 1024)));
        }
    }

    #[test]
    fn damaged_compressed_bodies_decode_or_say_why(
        at in any::<prop::sample::Index>(),
        byte in any::<u8>(),
        codec in 0usize..5,
    ) {
        // A valid body of each codec with one byte changed: the decoders' state machines are
        // reached, not only their header checks.
        let (compression, mut bytes) = crate::message::body::tests::samples().swap_remove(codec);
        let i = at.index(bytes.len());
        bytes[i] = byte;
        let kombu = crate::message::body::Encoding::default().with_compression(Some(compression));
        match crate::message::body::decompress(&bytes, &kombu, 1024) {
            Ok(Some(d)) => prop_assert!(d.bytes.len() <= 1024, "{} bytes", d.bytes.len()),
            Ok(None) => prop_assert!(false, "{} is a compression Lazarus undoes", compression),
            Err(why) => prop_assert!(!why.trim().is_empty()),
        }
    }

    #[test]
    fn errors_that_differ_only_in_what_varies_share_a_template(
        words in vec("[A-Za-z]{1,10}", 1..8),
        slots in vec((0usize..8, any::<u64>(), any::<u64>(), any::<u128>(), any::<u128>()), 1..4),
        kind in "[A-Z][a-z]{2,8}(Exception|Error)",
    ) {
        // The same words, with values of one kind in the same places, differing in value.
        let fill = |pick: usize, n: u64, uuid: u128| match pick {
            0 => n.to_string(),
            1 => format!("C-{n}"),
            2 => format!("INV-2026-{:05}", n % 100_000),
            3 => {
                let h = format!("{uuid:032x}");
                format!("{}-{}-{}-{}-{}", &h[..8], &h[8..12], &h[12..16], &h[16..20], &h[20..])
            }
            4 => format!("user{}@example.com", n % 1000),
            5 => format!("'{}'", n % 97),
            6 => format!("{}.{}s", n % 100, n % 10),
            _ => format!("0x{n:x}"),
        };
        let mut one = words.clone();
        let mut two = words.clone();
        for (at, (pick, a, b, ua, ub)) in slots.iter().enumerate() {
            let at = (at * 3) % (one.len() + 1);
            one.insert(at, fill(*pick, *a, *ua));
            two.insert(at, fill(*pick, *b, *ub));
        }
        let (one, two) = (one.join(" "), two.join(" "));
        let a = crate::message::cause::Cause::from_text(&format!("{kind}: {one}"));
        let b = crate::message::cause::Cause::from_text(&format!("{kind}: {two}"));
        prop_assert_eq!(a.signature(), b.signature(), "{} / {}", one, two);
        prop_assert_eq!(a.error_type.as_deref(), Some(kind.as_str()));
    }

    #[test]
    fn different_exception_types_never_share_a_signature(
        a in "[a-z]{1,6}(\\.[a-z]{1,6}){0,2}\\.[A-Z][a-z]{1,8}(Exception|Error)",
        b in "[a-z]{1,6}(\\.[a-z]{1,6}){0,2}\\.[A-Z][a-z]{1,8}(Exception|Error)",
        message in "[a-z ]{0,40}[0-9]{0,5}",
    ) {
        prop_assume!(a != b);
        let one = crate::message::cause::Cause::from_text(&format!("{a}: {message}"));
        let two = crate::message::cause::Cause::from_text(&format!("{b}: {message}"));
        prop_assert_eq!(one.error_type.as_deref(), Some(a.as_str()));
        prop_assert_ne!(one.signature(), two.signature());
    }

    #[test]
    fn any_error_text_derives_a_bounded_cause(text in "\\PC{0,400}") {
        let cause = crate::message::cause::Cause::from_text(&text);
        prop_assert!(cause.template.chars().count() <= crate::message::cause::MAX_TEMPLATE_CHARS);
        prop_assert!(cause.message.chars().count() <= 300);
    }

    #[test]
    fn every_dlq_has_a_key_of_its_own_that_reads_back(
        vhosts in vec("[a-c/%]{0,3}", 2),
        names in vec("[a-c/%]{1,3}", 2),
        home in "[a-c/]{1,2}",
    ) {
        // Keys never start a vhost with `/` or hold `%` unescaped, and an empty vhost is home's.
        let dlq = |i: usize| crate::message::dlq::Dlq {
            broker: crate::message::dlq::DEFAULT_BROKER.to_owned(),
            vhost: crate::message::dlq::stored_vhost(&vhosts[i], &home),
            name: names[i].clone(),
        };
        let (a, b) = (dlq(0), dlq(1));
        prop_assert_eq!(crate::message::dlq::Dlq::parse(&a.key(), &home).unwrap(), a.clone());
        prop_assert_eq!(crate::message::dlq::Dlq::from_key(&a.key(), &a.vhost), a.clone());
        prop_assert_eq!(a.key() == b.key(), a == b, "{:?} {:?}", a, b);
    }
}

/// Header names of every framework convention (some in another case), beside any others.
fn convention_name() -> impl Strategy<Value = Vec<u8>> {
    let names = prop::sample::select(vec![
        "x-exception-message",
        "x-exception-stacktrace",
        "x-original-exchange",
        "x-original-routingKey",
        "X-ORIGINAL-EXCHANGE",
        "__TypeId__",
        "MT-Reason",
        "MT-Fault-InputAddress",
        "MT-Fault-ExceptionType",
        "MT-Fault-Message",
        "MT-Fault-StackTrace",
        "MT-Fault-MessageType",
        "MT-MessageType",
        "NServiceBus.FailedQ",
        "NServiceBus.ExceptionInfo.Message",
        "NServiceBus.EnclosedMessageTypes",
        "NServiceBus.MessageId",
        "type",
        "X-Message-Stamp-Symfony\\Component\\Messenger\\Stamp\\ErrorDetailsStamp",
        "X-Message-Stamp-Symfony\\Component\\Messenger\\Stamp\\SentToFailureTransportStamp",
        "reason_poisoned",
        "topic_poisoned",
        "handler_poisoned",
        "x-death",
    ]);
    prop_oneof![names.prop_map(|n| n.as_bytes().to_vec()), name()]
}

/// Values a convention header may hold: anything, or text shaped like what it expects.
fn convention_value() -> impl Strategy<Value = AmqpValue> {
    let shaped = prop::sample::select(vec![
        "fault",
        "dead-letter",
        "",
        "rabbitmq://h/q",
        "rabbitmq://h/%2F/q?queue=x",
        "queue:q",
        "rabbitmq://h/a/b/c",
        "amqp://h/q",
        "rabbitmq://h/%zz/q",
        "panic occurred: 1, stacktrace: \n",
        "[]",
        "[{}]",
        r#"[{"exceptionClass":1,"flattenException":{"previous":{"previous":7}}}]"#,
        r#"[{"originalReceiverName":null}]"#,
        "A, B;C",
        ";",
    ]);
    prop_oneof![
        value(),
        shaped.prop_map(AmqpValue::text),
        "\\PC{0,40}".prop_map(|s| AmqpValue::text(&s)),
    ]
}

/// Bodies a convention reads: anything, Dramatiq-shaped JSON, PHP-serialized envelopes
/// (the real one cut or damaged anywhere) and base64.
fn convention_body() -> impl Strategy<Value = String> {
    let php = include_str!("message/conventions/fixtures/symfony_php_body.txt");
    prop_oneof![
        "\\PC{0,200}",
        ("[a-z.]{0,8}", "\\PC{0,20}", any::<bool>()).prop_map(|(q, a, opts)| format!(
            r#"{{"queue_name":"{q}","actor_name":{a:?},"options":{}}}"#,
            if opts { r#"{"traceback":["x"]}"# } else { "7" }
        )),
        (any::<prop::sample::Index>(), any::<u8>()).prop_map(move |(at, byte)| {
            let i = at.index(php.len());
            let mut bytes = php.as_bytes().to_vec();
            bytes[i] = byte;
            let cut = at.index(php.len() + 1);
            String::from_utf8_lossy(&bytes[..cut]).into_owned()
        }),
        "[A-Za-z0-9+/=]{0,80}".prop_map(|b| format!("TzozNjpcIlN5bWZvbnlc{b}")),
        "\\PC{0,60}"
            .prop_map(|s| format!(r#"O:36:\"Symfony\\Component\\Messenger\\Envelope\":{s}"#)),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1024))]

    #[test]
    fn any_headers_and_body_read_as_a_convention_or_none(
        headers in table_of(convention_name(), convention_value(), 0..8),
        body in proptest::option::of(convention_body()),
        queue in prop::sample::select(vec!["q_error", "q_skipped", "q.XQ", "in.g.dlq", "error", "_error", ".XQ", "dlq"]),
        routing_key in "[a-z.]{0,6}",
        vhost in prop::sample::select(vec!["/", "billing"]),
    ) {
        let delivery = crate::message::conventions::Delivery {
            queue, vhost, routing_key: &routing_key, headers: Some(&headers), body_text: body.as_deref(),
        };
        if let Some(failure) = crate::message::conventions::read(&delivery) {
            if let Some(target) = &failure.target {
                prop_assert!(target.exchange.len() <= 255 && target.routing_key.len() <= 255);
                prop_assert!(failure.target_from.is_some());
            }
            prop_assert!(failure.stack_trace.as_ref().is_none_or(|t| t.len() <= crate::message::conventions::MAX_TRACE_BYTES));
            for text in [&failure.error_type, &failure.message, &failure.message_type, &failure.failed_queue] {
                prop_assert!(text.as_ref().is_none_or(|t| t.len() <= crate::message::conventions::MAX_TEXT_BYTES));
            }
            prop_assert!(failure.problems.iter().all(|p| !p.is_empty()));
        }
    }
}
