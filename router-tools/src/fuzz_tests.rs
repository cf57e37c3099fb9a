//! Property tests of the decoders of the load tools that read what someone else wrote: the
//! Mooncake trace parser (files). Arbitrary and structured input with extreme values; none
//! may panic, and what they hold stays bounded.

use crate::bench::trace::{MAX_INPUT_LENGTH, Trace, prompt_tokens};
use proptest::prelude::*;
use serde_json::json;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Any trace text parses or names a line; every record's prompt is exactly its
    /// `input_length` long, which is bounded.
    #[test]
    fn trace_lines_parse_into_bounded_prompts(
        lines in prop::collection::vec(
            prop_oneof![
                2 => (
                    prop_oneof![Just(0u64), any::<u64>()],
                    prop_oneof![1u64..3000, Just(MAX_INPUT_LENGTH), Just(MAX_INPUT_LENGTH + 1), Just(u64::MAX)],
                    any::<u64>(),
                    prop::collection::vec(any::<u64>(), 0..8),
                ).prop_map(|(t, i, o, h)| json!({"timestamp": t, "input_length": i, "output_length": o, "hash_ids": h}).to_string()),
                1 => ".{0,40}",
                1 => any::<i64>().prop_map(|v| v.to_string()),
                1 => Just("[]".to_owned()),
            ],
            0..5,
        ),
        block_tokens in prop_oneof![Just(0usize), 1usize..600, Just(usize::MAX)],
    ) {
        let text = lines.join("\n");
        if let Ok(trace) = Trace::parse(&text, Some(3)) {
            for (line, record) in &trace.records {
                prop_assert!(record.input_length <= MAX_INPUT_LENGTH);
                if record.input_length <= 4096 {
                    let prompt = prompt_tokens(record, *line, block_tokens);
                    prop_assert_eq!(prompt.len() as u64, record.input_length);
                }
            }
        }
    }

}
