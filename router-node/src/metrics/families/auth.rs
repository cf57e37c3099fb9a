//! The API keys' families (`crate::auth`): requests checked against the keys, by key name and
//! outcome; the keys loaded; reloads of the keys file. The `key` label is a key's name from
//! the keys file (`none` for a request without a valid key), never a key or its digest.

use super::Counters;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

/// Registered once, recorded into by the frontend and the keys file's reloader.
#[derive(Debug, Default)]
pub(in crate::metrics) struct AuthFamilies {
    pub requests: Counters,
    pub keys: Gauge,
    pub reloads: Counters,
}

impl AuthFamilies {
    pub fn register(registry: &mut Registry) -> Self {
        let f = Self::default();
        registry.register(
            "auth_requests",
            "Requests checked against the API keys, by key name (none: no valid key) and outcome (ok, unauthenticated, forbidden, requests_limited, tokens_limited)",
            f.requests.clone(),
        );
        registry.register(
            "auth_keys",
            "API keys in use (0 without [auth] keys_file)",
            f.keys.clone(),
        );
        registry.register(
            "auth_reloads",
            "Reloads of the API keys file, by outcome (ok; error: the keys in use stay)",
            f.reloads.clone(),
        );
        f
    }
}
