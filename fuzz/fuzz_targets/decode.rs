//! Fuzzes what arrives from outside: header tables (as the archive stores them, typed JSON)
//! through the x-death decoder and the AMQP conversion, and search text through the parser.
#![no_main]

use lazarus::amqp::headers::{table_from_amqp, table_to_amqp, Table};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(table) = serde_json::from_slice::<Table>(data) {
        let history = lazarus::death::decode(Some(&table));
        if history.replay_target.is_some() {
            assert!(history.first_death.is_some());
        }
        // Whatever decodes converts to AMQP and back unchanged.
        assert_eq!(table_from_amqp(&table_to_amqp(&table)), table);
    }
    let text = String::from_utf8_lossy(data);
    let _ = lazarus::search::parse(&text, &["invoice".to_owned()]);
});
