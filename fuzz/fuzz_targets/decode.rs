//! Fuzzes what arrives from outside: frame payloads through the wire decoders, header
//! tables (as the archive stores them, typed JSON) through the x-death decoder and the
//! wire encoding, search text through the parser (and its CJK bigrams), and body bytes
//! through the MessagePack, CBOR, protobuf (read by field number) and kombu-compression
//! decoders.
#![no_main]

use lazarus::message::headers::Table;
use lazarus::message::codec::{decode_content_header, decode_table, Writer};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = decode_content_header(data);
    let _ = lazarus::amqp::wire::method::parse(data);
    if let Ok(table) = decode_table(data) {
        // What decodes encodes back to the same bytes.
        let mut again = Vec::new();
        again.put_table(&table).unwrap();
        assert_eq!(&again[4..], data);
    }
    if let Ok(table) = serde_json::from_slice::<Table>(data) {
        let history = lazarus::message::death::decode(Some(&table));
        if history.replay_target.is_some() {
            assert!(history.first_death.is_some());
        }
    }
    let text = String::from_utf8_lossy(data);
    if let Ok(search) = lazarus::message::search::parse(&text, &["invoice".to_owned()]) {
        let _ = search.text_query();
    }
    let _ = lazarus::message::cjk::bigrams(&text);
    use lazarus::message::body::{text as body_text, Encoding};
    for content_type in [
        "application/x-msgpack",
        "application/cbor",
        "application/x-protobuf",
    ] {
        let _ = body_text(data, &Encoding::new(Some(content_type), None), 1 << 16);
    }
    let kombu = Encoding::default().with_compression(Some("application/x-gzip"));
    let _ = body_text(data, &kombu, 1 << 16);
});
