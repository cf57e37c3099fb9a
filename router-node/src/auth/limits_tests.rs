//! Unit tests of a key's rate limits on tokio's paused clock: the requests bucket's burst,
//! wait and refill, the tokens bucket's all-or-nothing takes and its burst, the checks on a
//! configured rate, and waits as `Retry-After` seconds.

use super::*;

fn limits(requests: Option<(f64, u32)>, tokens: Option<(f64, u32)>) -> KeyLimits {
    let spec = |rate: Option<(f64, u32)>| {
        rate.map(|(per_s, burst)| RateSpec::new(per_s, Some(burst)).expect("a valid rate"))
    };
    KeyLimits::new(LimitSpec {
        requests: spec(requests),
        tokens: spec(tokens),
    })
}

#[tokio::test(start_paused = true)]
async fn the_requests_bucket_refuses_past_its_burst_and_refills_at_its_rate() {
    let limits = limits(Some((2.0, 3)), None);
    for _ in 0..3 {
        assert_eq!(limits.request(), Ok(()));
    }
    let wait = limits.request().expect_err("the fourth is over the burst");
    assert_eq!(wait, Duration::from_millis(500));
    assert_eq!(retry_after_secs(wait), 1);
    tokio::time::advance(Duration::from_millis(499)).await;
    assert!(limits.request().is_err());
    tokio::time::advance(Duration::from_millis(1)).await;
    assert_eq!(limits.request(), Ok(()));
    assert!(limits.request().is_err());
    // Tokens are not limited here.
    assert_eq!(limits.tokens(u64::MAX), Ok(()));
}

#[tokio::test(start_paused = true)]
async fn the_tokens_bucket_takes_all_or_nothing_and_never_more_than_its_burst() {
    let limits = limits(None, Some((10.0, 100)));
    assert_eq!(limits.tokens(60), Ok(()));
    // 40 left: 60 more need 2 s of refill; nothing is taken by the refusal.
    assert_eq!(
        limits.tokens(60),
        Err(TokensRefused::Wait(Duration::from_secs(2)))
    );
    assert_eq!(limits.tokens(40), Ok(()));
    for needed in [101, u64::from(u32::MAX) + 1, u64::MAX] {
        assert_eq!(
            limits.tokens(needed),
            Err(TokensRefused::OverBurst { needed, burst: 100 })
        );
    }
    tokio::time::advance(Duration::from_secs(10)).await;
    assert_eq!(limits.tokens(100), Ok(()));
    // A request of nothing always passes; requests are not limited here.
    assert_eq!(limits.tokens(0), Ok(()));
    assert_eq!(limits.request(), Ok(()));
}

#[test]
fn rates_and_bursts_are_checked_and_the_burst_defaults_to_a_seconds_worth() {
    assert_eq!(RateSpec::new(2.5, None).map(|r| r.burst), Ok(3));
    assert_eq!(RateSpec::new(0.1, None).map(|r| r.burst), Ok(1));
    assert_eq!(RateSpec::new(5.0, Some(50)).map(|r| r.burst), Ok(50));
    assert!(RateSpec::new(5.0, Some(0)).is_err());
    for bad in [0.0, -1.0, f64::NAN, f64::INFINITY, 2e9, 1e-300] {
        assert!(RateSpec::new(bad, None).is_err(), "{bad}");
    }
    assert_eq!(retry_after_secs(Duration::ZERO), 1);
    assert_eq!(retry_after_secs(Duration::from_millis(1001)), 2);
    assert_eq!(retry_after_secs(Duration::from_secs(20)), 20);
}
