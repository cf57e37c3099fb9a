//! A real HAProxy in front of router replicas, as an operator would run one: HTTP mode, round
//! robin by default, one server per replica, each health-checked with `GET /ready` (or another
//! path: simulated workers answer `/health`) every
//! 200 ms (down after 2 failures, up after 2 successes), a refused connection retried on
//! another replica (`retries 2`, `option redispatch`), timeouts long enough for streams, and
//! a stats page whose CSV tells which servers HAProxy sees up.
//!
//! The binary is `$HAPROXY_BIN`, else `.tools/haproxy/bin/haproxy` (what
//! `scripts/install-haproxy.sh` unpacks from Debian's package; `scripts/test.sh` runs it).
//! HAProxy cannot bind port 0 and report the port, so the ports are picked by binding and
//! releasing a socket; a start that loses that race is retried on other ports. Dropping the
//! handle kills the process.

use super::process::{Proc, START_TIMEOUT, Stopped};
use super::{TempDir, free_port, workspace_root};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

/// Overrides where the `haproxy` binary is.
pub const HAPROXY_BIN_ENV: &str = "HAPROXY_BIN";

/// The backend (and so the stats' `pxname`) holding the replicas.
pub const BACKEND: &str = "replicas";

const INSTALL_HINT: &str = "the cluster tests need HAProxy: run scripts/install-haproxy.sh \
     (unpacks Debian's haproxy into .tools/haproxy; scripts/test.sh runs it), or set \
     HAPROXY_BIN to a haproxy binary";

/// Starts lost to a port race are retried this many times.
const START_ATTEMPTS: usize = 3;

/// `$HAPROXY_BIN`, else `<workspace>/.tools/haproxy/bin/haproxy`. Panics with the install
/// command when there is none.
pub fn haproxy_bin() -> PathBuf {
    if let Some(bin) = std::env::var_os(HAPROXY_BIN_ENV).filter(|b| !b.is_empty()) {
        let bin = PathBuf::from(bin);
        assert!(
            bin.is_file(),
            "{HAPROXY_BIN_ENV}={} is not a file; {INSTALL_HINT}",
            bin.display()
        );
        return bin;
    }
    let bin = workspace_root().join(".tools/haproxy/bin/haproxy");
    assert!(
        bin.is_file(),
        "no haproxy at {}; {INSTALL_HINT}",
        bin.display()
    );
    bin
}

/// How HAProxy balances and checks the replicas.
#[derive(Debug, Clone)]
pub struct HaproxyConfig {
    /// HAProxy's `balance` algorithm (`roundrobin`, `leastconn`, ...).
    pub balance: String,
    /// Health check period of `GET /ready`.
    pub check_every: Duration,
    /// Failed checks before a server is down.
    pub fall: u32,
    /// Passed checks before a server is up again.
    pub rise: u32,
    /// Client and server inactivity timeouts: long, a stream may pause between tokens.
    pub stream_timeout: Duration,
    /// The health check's path: `/ready` on replicas, `/health` on simulated workers.
    pub check_uri: String,
}

impl Default for HaproxyConfig {
    fn default() -> Self {
        Self {
            balance: "roundrobin".to_owned(),
            check_every: Duration::from_millis(200),
            fall: 2,
            rise: 2,
            stream_timeout: Duration::from_secs(600),
            check_uri: "/ready".to_owned(),
        }
    }
}

impl HaproxyConfig {
    /// The configuration file for `backends` (base URLs, `http://host:port`).
    pub fn render(&self, port: u16, stats_port: u16, backends: &[String]) -> String {
        let ms = |d: Duration| d.as_millis();
        let servers: String = backends
            .iter()
            .enumerate()
            .map(|(i, url)| {
                let address = url.trim_start_matches("http://").trim_end_matches('/');
                format!("    server replica{i} {address}\n")
            })
            .collect();
        format!(
            "global\n    maxconn 4096\n\n\
             defaults\n    mode http\n    option http-no-delay\n    timeout connect 2s\n    timeout client {stream}ms\n    \
             timeout server {stream}ms\n    timeout tunnel {stream}ms\n    \
             timeout http-request 30s\n    timeout http-keep-alive 10s\n    timeout queue 30s\n    \
             timeout check 1s\n\n\
             frontend switchyard\n    bind 127.0.0.1:{port}\n    default_backend {BACKEND}\n\n\
             backend {BACKEND}\n    balance {balance}\n    retries 2\n    option redispatch\n    \
             option httpchk\n    \
             http-check send meth GET uri {check_uri}\n    http-check expect status 200\n    \
             default-server check inter {inter}ms fall {fall} rise {rise}\n{servers}\n\
             frontend stats\n    bind 127.0.0.1:{stats_port}\n    stats enable\n    \
             stats uri /stats\n",
            stream = ms(self.stream_timeout),
            balance = self.balance,
            check_uri = self.check_uri,
            inter = ms(self.check_every).max(1),
            fall = self.fall,
            rise = self.rise,
        )
    }
}

/// One server of the backend as the stats page shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerStatus {
    /// `replica<i>`, in the order of the backends given.
    pub name: String,
    /// `UP`, `DOWN`, `UP 1/2` (going down), `DOWN 1/2` (going up), `MAINT`, ...
    pub status: String,
    /// The last check's result (`L7OK` when `/ready` answered 200).
    pub check_status: String,
}

impl ServerStatus {
    /// Up, and its last health check passed (not merely up since start).
    pub fn checked_up(&self) -> bool {
        self.status == "UP" && self.check_status == "L7OK"
    }
}

/// A running HAProxy, killed on drop.
#[derive(Debug)]
pub struct Haproxy {
    proc: Proc,
    port: u16,
    stats_port: u16,
    _dir: TempDir,
}

impl Haproxy {
    /// Starts HAProxy in front of `backends` (base URLs) with the default configuration.
    pub fn start(backends: &[String]) -> Self {
        Self::start_with(backends, &HaproxyConfig::default())
    }

    /// Starts HAProxy in front of `backends`; returns once it accepts connections.
    pub fn start_with(backends: &[String], config: &HaproxyConfig) -> Self {
        let bin = haproxy_bin();
        let mut failures = String::new();
        for attempt in 1..=START_ATTEMPTS {
            let dir = TempDir::new("haproxy");
            let (port, stats_port) = (free_port(), free_port());
            let file = dir.write("haproxy.cfg", &config.render(port, stats_port, backends));
            let mut command = Command::new(&bin);
            command.arg("-db").arg("-f").arg(&file);
            let mut proc = Proc::spawn_command("haproxy", command);
            let deadline = Instant::now() + START_TIMEOUT;
            let started = loop {
                if let Some(status) = proc.exited() {
                    break Err(format!("exited ({status})"));
                }
                let listening = [port, stats_port].iter().all(|p| {
                    TcpStream::connect_timeout(
                        &([127, 0, 0, 1], *p).into(),
                        Duration::from_millis(100),
                    )
                    .is_ok()
                });
                if listening {
                    break Ok(());
                }
                if Instant::now() > deadline {
                    break Err(format!("not listening within {START_TIMEOUT:?}"));
                }
                std::thread::sleep(Duration::from_millis(20));
            };
            match started {
                Ok(()) => {
                    return Self {
                        proc,
                        port,
                        stats_port,
                        _dir: dir,
                    };
                }
                Err(why) => failures.push_str(&format!(
                    "attempt {attempt} on ports {port}/{stats_port}: {why}\n{}\n",
                    proc.output()
                )),
            }
        }
        panic!("haproxy ({}) did not start:\n{failures}", bin.display());
    }

    /// Its process id.
    pub fn id(&self) -> u32 {
        self.proc.id()
    }

    /// `http://127.0.0.1:<port>`: where clients send requests.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The stats page as CSV.
    pub fn stats_url(&self) -> String {
        format!("http://127.0.0.1:{}/stats;csv", self.stats_port)
    }

    /// Every replica server as the stats page shows it now.
    pub async fn servers(&self, http: &reqwest::Client) -> Result<Vec<ServerStatus>, String> {
        let response = http
            .get(self.stats_url())
            .send()
            .await
            .map_err(|e| format!("haproxy stats: {e}"))?;
        let text = response
            .text()
            .await
            .map_err(|e| format!("haproxy stats: {e}"))?;
        parse_stats(&text)
    }

    pub fn output(&self) -> String {
        self.proc.output()
    }

    /// SIGTERM (HAProxy's immediate stop) and the exit.
    pub fn stop(self) -> Stopped {
        self.proc.stop()
    }
}

/// The replica servers of HAProxy's stats CSV (its header line starts with `# pxname`).
pub fn parse_stats(csv: &str) -> Result<Vec<ServerStatus>, String> {
    let mut lines = csv.lines();
    let header: Vec<&str> = lines
        .next()
        .and_then(|h| h.strip_prefix("# "))
        .ok_or_else(|| format!("haproxy stats: no CSV header in {csv:?}"))?
        .split(',')
        .collect();
    let column = |name: &str| {
        header
            .iter()
            .position(|c| *c == name)
            .ok_or_else(|| format!("haproxy stats: no column {name}"))
    };
    let (px, sv, status, check) = (
        column("pxname")?,
        column("svname")?,
        column("status")?,
        column("check_status")?,
    );
    Ok(lines
        .map(|line| line.split(',').collect::<Vec<_>>())
        .filter(|row| {
            row.get(px) == Some(&BACKEND)
                && row
                    .get(sv)
                    .is_some_and(|s| *s != "BACKEND" && *s != "FRONTEND")
        })
        .map(|row| {
            let cell = |i: usize| row.get(i).copied().unwrap_or_default().to_owned();
            ServerStatus {
                name: cell(sv),
                status: cell(status),
                check_status: cell(check),
            }
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_config_checks_ready_on_every_replica() {
        let text = HaproxyConfig::default().render(
            8000,
            8001,
            &[
                "http://127.0.0.1:9000".to_owned(),
                "http://127.0.0.1:9001/".to_owned(),
            ],
        );
        assert!(text.contains("bind 127.0.0.1:8000"), "{text}");
        assert!(text.contains("server replica0 127.0.0.1:9000\n"), "{text}");
        assert!(text.contains("server replica1 127.0.0.1:9001\n"), "{text}");
        assert!(text.contains("uri /ready"), "{text}");
        assert!(text.contains("inter 200ms fall 2 rise 2"), "{text}");
        assert!(text.contains("balance roundrobin"), "{text}");
    }

    #[test]
    fn the_stats_csv_names_each_server_and_its_check() {
        let csv = "# pxname,svname,qcur,status,check_status,\n\
                   switchyard,FRONTEND,,OPEN,,\n\
                   replicas,replica0,0,UP,L7OK,\n\
                   replicas,replica1,0,DOWN,L7STS,\n\
                   replicas,BACKEND,0,UP,,\n";
        let servers = parse_stats(csv).expect("a CSV with a header");
        assert_eq!(servers.len(), 2);
        assert!(servers[0].checked_up());
        assert_eq!(servers[1].status, "DOWN");
        assert!(!servers[1].checked_up());
        assert!(parse_stats("<html>").is_err());
    }
}
