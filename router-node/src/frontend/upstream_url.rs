//! The URL of a worker's OpenAI route, parsed once per worker endpoint rather than once per
//! request: parsing `http://host:port/v1/completions` (host, IDNA, path normalisation) was
//! about a twentieth of a routed request's instructions. The directory stays the source of
//! truth: an entry is used only while the directory still gives the same base URL, so a
//! worker that moved is parsed again.

use axum::http::Uri;
use router_core::WorkerId;
use std::collections::HashMap;
use std::sync::RwLock;

/// Entries kept before the cache starts over (workers come and go over a node's life; each
/// known worker needs at most one entry per route).
const MAX_ENTRIES: usize = 4096;

/// A worker and one of its routes' paths.
type Route = (WorkerId, &'static str);

/// Parsed route URLs by worker and route path.
#[derive(Debug, Default)]
pub(crate) struct UpstreamUrls {
    /// (worker, route path) → (the base URL it was built from, the parsed URL).
    parsed: RwLock<HashMap<Route, (String, Uri)>>,
}

impl UpstreamUrls {
    /// `base` (a worker's `http://host:port`, no trailing `/v1`) joined with `path`, from
    /// the cache when `base` is the one it was built from.
    pub(crate) fn get(
        &self,
        worker: WorkerId,
        base: &str,
        path: &'static str,
    ) -> Result<Uri, String> {
        let key = (worker, path);
        if let Ok(parsed) = self.parsed.read()
            && let Some((known, url)) = parsed.get(&key)
            && known == base
        {
            return Ok(url.clone());
        }
        let url: Uri = format!("{}{path}", base.trim_end_matches('/'))
            .parse()
            .map_err(|e| format!("endpoint {base:?} is not a URL: {e}"))?;
        if url.scheme_str() != Some("http") || url.host().is_none() {
            return Err(format!("endpoint {base:?} is not an http:// URL"));
        }
        if let Ok(mut parsed) = self.parsed.write() {
            if parsed.len() >= MAX_ENTRIES {
                parsed.clear();
            }
            parsed.insert(key, (base.to_owned(), url.clone()));
        }
        Ok(url)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_route_url_follows_its_worker_base_and_a_bad_base_is_an_error() {
        let urls = UpstreamUrls::default();
        let path = "/v1/completions";
        let first = urls.get(WorkerId(1), "http://127.0.0.1:8000/", path);
        assert_eq!(
            first.map(|u| u.to_string()).as_deref(),
            Ok("http://127.0.0.1:8000/v1/completions")
        );
        let again = urls.get(WorkerId(1), "http://127.0.0.1:8000/", path);
        assert_eq!(
            again.map(|u| u.to_string()).as_deref(),
            Ok("http://127.0.0.1:8000/v1/completions")
        );
        // The worker moved: the directory's new base wins over the cached one.
        let moved = urls.get(WorkerId(1), "http://10.0.0.7:9000", path);
        assert_eq!(
            moved.map(|u| u.to_string()).as_deref(),
            Ok("http://10.0.0.7:9000/v1/completions")
        );
        let chat = urls.get(WorkerId(1), "http://10.0.0.7:9000", "/v1/chat/completions");
        assert_eq!(
            chat.map(|u| u.to_string()).as_deref(),
            Ok("http://10.0.0.7:9000/v1/chat/completions")
        );
        assert!(urls.get(WorkerId(2), "not a url", path).is_err());
        assert!(urls.get(WorkerId(2), "https://tls.example", path).is_err());
    }
}
