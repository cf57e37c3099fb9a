//! The SGLang convention: both legs booked, then sent at once.

use router_node::frontend::DisaggConvention;

const CONVENTION: DisaggConvention = DisaggConvention::Sglang;

#[allow(clippy::duplicate_mod, dead_code)]
#[path = "../../support/disagg.rs"]
mod disagg;
#[allow(clippy::duplicate_mod)]
#[path = "../../support/disagg_leaks.rs"]
mod leaks;

#[tokio::test]
async fn a_prefill_worker_gone_mid_request_leaves_both_pools_idle() {
    leaks::a_prefill_worker_gone_from_the_directory_leaves_both_pools_idle().await;
}

#[tokio::test]
async fn a_decode_retry_on_a_saturated_node_leaves_both_pools_idle() {
    leaks::a_decode_leg_placed_again_on_a_saturated_node_leaves_both_pools_idle().await;
}
