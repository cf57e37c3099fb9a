//! The allow-list of worker endpoints: which hosts an announcement may name as the place the
//! router sends prompts to. Pure (no I/O, no name resolution).
//!
//! An entry is an IP address (`127.0.0.1`, `::1`), a CIDR block (`10.0.0.0/8`,
//! `fd00::/8`), a host name (`engine.local`, matched exactly, case-insensitively) or a name
//! suffix (`*.engines.internal`, matching any name below it, not the name itself). An endpoint
//! is parsed as the proxy will use it (a `http` or `https` URL, by the same URL parser the
//! HTTP client uses): an IP host is matched against addresses and blocks (an IPv4-mapped IPv6
//! address as its IPv4 address), a name against names and suffixes, never against blocks (the
//! router does not resolve names here; list the names you trust). An endpoint with user info
//! (`http://a@b`) or another scheme is refused whatever the list says.
//!
//! An empty list allows every endpoint (the behaviour before the list existed; the node warns
//! at start-up).

use std::net::IpAddr;

/// A parsed allow-list.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EndpointAllowList {
    entries: Vec<Entry>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Entry {
    Net { addr: IpAddr, prefix: u8 },
    Name(String),
    Suffix(String),
}

/// An entry of the list that is not an address, a block or a name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("entry {index} ({entry:?}): {reason}")]
pub struct AllowListError {
    pub index: usize,
    pub entry: String,
    pub reason: String,
}

/// Why an endpoint was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EndpointRefused {
    #[error("not an http(s) URL with a host: {0}")]
    Unparsable(String),
    #[error("user info in a worker endpoint is not accepted")]
    UserInfo,
    #[error("host {0} is not in the allow-list")]
    NotAllowed(String),
}

impl EndpointAllowList {
    /// Parses `entries`; the first bad one is reported by its index.
    pub fn parse<S: AsRef<str>>(entries: &[S]) -> Result<Self, AllowListError> {
        let entries = entries
            .iter()
            .enumerate()
            .map(|(index, raw)| {
                parse_entry(raw.as_ref()).map_err(|reason| AllowListError {
                    index,
                    entry: raw.as_ref().to_owned(),
                    reason,
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self { entries })
    }

    /// No entry: every endpoint is allowed.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Whether the router may send requests to `endpoint`.
    pub fn check(&self, endpoint: &str) -> Result<(), EndpointRefused> {
        if self.entries.is_empty() {
            return Ok(());
        }
        let url = url::Url::parse(endpoint)
            .map_err(|e| EndpointRefused::Unparsable(format!("{endpoint:?}: {e}")))?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(EndpointRefused::Unparsable(format!(
                "{endpoint:?}: scheme {}",
                url.scheme()
            )));
        }
        if !url.username().is_empty() || url.password().is_some() {
            return Err(EndpointRefused::UserInfo);
        }
        let allowed = match url.host() {
            None => {
                return Err(EndpointRefused::Unparsable(format!(
                    "{endpoint:?}: no host"
                )));
            }
            Some(url::Host::Ipv4(v4)) => self.allows_ip(IpAddr::V4(v4)),
            Some(url::Host::Ipv6(v6)) => self.allows_ip(IpAddr::V6(v6).to_canonical()),
            Some(url::Host::Domain(name)) => self.allows_name(name),
        };
        if allowed {
            Ok(())
        } else {
            Err(EndpointRefused::NotAllowed(
                url.host_str().unwrap_or_default().to_owned(),
            ))
        }
    }

    fn allows_ip(&self, ip: IpAddr) -> bool {
        self.entries.iter().any(|entry| match entry {
            Entry::Net { addr, prefix } => in_block(ip, *addr, *prefix),
            Entry::Name(_) | Entry::Suffix(_) => false,
        })
    }

    fn allows_name(&self, name: &str) -> bool {
        let name = name.trim_end_matches('.').to_ascii_lowercase();
        self.entries.iter().any(|entry| match entry {
            Entry::Name(n) => *n == name,
            Entry::Suffix(s) => name.len() > s.len() + 1 && name.ends_with(&format!(".{s}")),
            Entry::Net { .. } => false,
        })
    }
}

fn parse_entry(raw: &str) -> Result<Entry, String> {
    let raw = raw.trim();
    if raw.is_empty() {
        return Err("is empty".to_owned());
    }
    if let Some((addr, prefix)) = raw.split_once('/') {
        let addr: IpAddr = addr
            .parse()
            .map_err(|_| format!("{addr:?} is not an IP address"))?;
        let addr = addr.to_canonical();
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let prefix: u8 = prefix
            .parse()
            .ok()
            .filter(|p| *p <= max)
            .ok_or_else(|| format!("prefix {prefix:?} must be 0..={max}"))?;
        return Ok(Entry::Net { addr, prefix });
    }
    let bare = raw
        .strip_prefix('[')
        .and_then(|r| r.strip_suffix(']'))
        .unwrap_or(raw);
    if let Ok(addr) = bare.parse::<IpAddr>() {
        let addr = addr.to_canonical();
        let prefix = if addr.is_ipv4() { 32 } else { 128 };
        return Ok(Entry::Net { addr, prefix });
    }
    let (suffix, name) = match raw.strip_prefix("*.") {
        Some(rest) => (true, rest),
        None => (false, raw),
    };
    let name = name.trim_end_matches('.').to_ascii_lowercase();
    let valid = !name.is_empty()
        && name.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && label
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        });
    if !valid {
        return Err(
            "must be an IP address, a CIDR block (10.0.0.0/8), a host name or *.suffix".to_owned(),
        );
    }
    Ok(if suffix {
        Entry::Suffix(name)
    } else {
        Entry::Name(name)
    })
}

/// Whether `ip` is inside `addr/prefix` (families must agree).
fn in_block(ip: IpAddr, addr: IpAddr, prefix: u8) -> bool {
    match (ip, addr) {
        (IpAddr::V4(ip), IpAddr::V4(net)) => {
            masked(u128::from(u32::from(ip)), 32, prefix)
                == masked(u128::from(u32::from(net)), 32, prefix)
        }
        (IpAddr::V6(ip), IpAddr::V6(net)) => {
            masked(u128::from(ip), 128, prefix) == masked(u128::from(net), 128, prefix)
        }
        _ => false,
    }
}

/// The top `prefix` bits of a `width`-bit value.
fn masked(value: u128, width: u8, prefix: u8) -> u128 {
    let drop = u32::from(width.saturating_sub(prefix));
    value.checked_shr(drop).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn list(entries: &[&str]) -> EndpointAllowList {
        EndpointAllowList::parse(entries).expect("a valid list")
    }

    #[test]
    fn addresses_blocks_names_and_suffixes_match_as_documented() {
        let l = list(&[
            "10.0.0.0/8",
            "127.0.0.1",
            "engine.local",
            "*.engines.internal",
            "fd00::/8",
            "[::1]",
        ]);
        for ok in [
            "http://10.1.2.3:8000",
            "http://10.255.255.255",
            "https://127.0.0.1:9/v1",
            "http://ENGINE.local:8000/",
            "http://engine.local.:8000",
            "http://gpu-3.engines.internal:8000",
            "http://a.b.engines.internal",
            "http://[fd12::5]:8000",
            "http://[::1]:8000",
            "http://[::ffff:10.9.9.9]:80",
        ] {
            assert_eq!(l.check(ok), Ok(()), "{ok}");
        }
        for refused in [
            "http://11.0.0.1:8000",
            "http://127.0.0.2:8000",
            "http://engine.local.evil.com",
            "http://evilengine.local",
            "http://engines.internal",
            "http://xengines.internal",
            "http://[fe80::1]:8000",
            "http://169.254.169.254/latest/meta-data",
            "http://0x7f000002",
        ] {
            assert!(
                matches!(l.check(refused), Err(EndpointRefused::NotAllowed(_))),
                "{refused}: {:?}",
                l.check(refused)
            );
        }
        // The URL parser reads hosts as the HTTP client does: these are 10.x hosts.
        assert_eq!(l.check("http://0x0a000001:8000"), Ok(()));
        assert_eq!(l.check("http://10.1"), Ok(()));
    }

    #[test]
    fn user_info_other_schemes_and_garbage_are_refused_whatever_the_list() {
        let l = list(&["0.0.0.0/0", "::/0", "*.com", "evil.com"]);
        assert_eq!(
            l.check("http://10.0.0.1:80@evil.com"),
            Err(EndpointRefused::UserInfo)
        );
        assert_eq!(
            l.check("http://user:pw@10.0.0.1"),
            Err(EndpointRefused::UserInfo)
        );
        for bad in [
            "ftp://10.0.0.1",
            "10.0.0.1:8000",
            "",
            "http://",
            "unix:/tmp/s",
        ] {
            assert!(
                matches!(l.check(bad), Err(EndpointRefused::Unparsable(_))),
                "{bad:?}: {:?}",
                l.check(bad)
            );
        }
        assert_eq!(l.check("http://anything.evil.com"), Ok(()));
    }

    #[test]
    fn an_empty_list_allows_everything_and_bad_entries_are_named() {
        let empty = list(&[]);
        assert!(empty.is_empty());
        assert_eq!(empty.check("http://169.254.169.254"), Ok(()));
        for (entries, index) in [
            (vec!["10.0.0.0/33"], 0),
            (vec!["127.0.0.1", "300.1.1.1/8"], 1),
            (vec!["ok.name", ""], 1),
            (vec!["http://engine"], 0),
            (vec!["a..b"], 0),
            (vec!["*."], 0),
            (vec!["::/129"], 0),
        ] {
            let err = EndpointAllowList::parse(&entries).expect_err("refused");
            assert_eq!(err.index, index, "{err}");
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// An address is inside a block exactly when their first `prefix` bits agree.
        #[test]
        fn v4_block_membership_is_the_prefix_bits(net in any::<u32>(), ip in any::<u32>(), prefix in 0u8..=32) {
            let l = list(&[&format!("{}/{prefix}", std::net::Ipv4Addr::from(net))]);
            let inside = prefix == 0 || (net >> (32 - u32::from(prefix))) == (ip >> (32 - u32::from(prefix)));
            let endpoint = format!("http://{}:8000", std::net::Ipv4Addr::from(ip));
            prop_assert_eq!(l.check(&endpoint).is_ok(), inside);
        }

        /// Arbitrary endpoints and entries never panic.
        #[test]
        fn arbitrary_text_never_panics(entry in ".{0,40}", endpoint in ".{0,80}") {
            if let Ok(l) = EndpointAllowList::parse(&[entry]) {
                let _ = l.check(&endpoint);
            }
        }
    }
}
