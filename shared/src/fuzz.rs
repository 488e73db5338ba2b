//! Every parser of outside input, fed arbitrary bytes and text: it answers (a value or an error), never panics.
//! `make fuzz` runs these with many more cases (`PROPTEST_CASES`) than the test suite does.

use proptest::prelude::*;
use uuid::Uuid;

use crate::{
    ingest::IngestBatch,
    jobs::{ContradictionCheckJob, DedupReviewJob, EntitySynthesisJob, FileScanJob},
    llm::parse_json,
    retrieval::{cooldown::Session, cooldown_token, mention::parse_mentions, time_anchor},
};

/// Text shaped like the input it stands for: JSON-ish pieces, dates, mentions, and anything at all.
fn texty() -> impl Strategy<Value = String> {
    prop_oneof![
        ".*",
        r#"[\{\}\[\]":,0-9a-z_ .@-]{0,200}"#,
        r"(on|before|after|in)? ?[0-9]{1,4}[./ -][0-9a-zA-Z]{1,9}[./ -]?[0-9]{0,4}\??",
        r#"[^@]{0,20}@memory:("[^"]{0,40}"?|.{0,40})"#,
    ]
}

proptest! {
    #[test]
    fn fuzz_ingest_and_job_messages(bytes in proptest::collection::vec(any::<u8>(), 0..2048), text in texty()) {
        for input in [bytes.as_slice(), text.as_bytes()] {
            if let Ok(batch) = serde_json::from_slice::<IngestBatch>(input) {
                let _ = crate::ingest::check(&batch);
            }
            let _ = serde_json::from_slice::<DedupReviewJob>(input);
            let _ = serde_json::from_slice::<ContradictionCheckJob>(input);
            let _ = serde_json::from_slice::<EntitySynthesisJob>(input);
            let _ = serde_json::from_slice::<FileScanJob>(input);
        }
    }

    #[test]
    fn fuzz_query_text(text in texty()) {
        let _ = parse_mentions(&text);
        let anchors = time_anchor::named(&text);
        let now = chrono::Utc::now();
        let _ = time_anchor::of_the_time(&anchors, now);
    }

    #[test]
    fn fuzz_model_answers(text in texty()) {
        let _ = parse_json::<serde_json::Value>(&text);
    }

    #[test]
    fn fuzz_cooldown_tokens(token in prop_oneof![".*", "[A-Za-z0-9_-]{0,400}"]) {
        let key = cooldown_token::TokenKey::random();
        let session = Session { organization_id: Uuid::nil(), agent_id: None, session_id: "s".into() };
        prop_assert_eq!(cooldown_token::decode(&key, &session, &token), None);
    }
}
