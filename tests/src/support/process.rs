//! Long-running `router-node` processes of a test: a node (`serve`) and a simulated worker
//! (`worker --sim`); [`Proc`] runs any other program too (HAProxy). Each node and worker
//! binds port 0 and reports the address it got (the node in its JSON log line "serving the
//! OpenAI API": `listen`, and `admin` for its admin listener; the worker on its first stdout
//! line), so tests never race for a free port.
//! Their output is collected for the assertion messages; dropping one kills it,
//! [`Proc::stop`] sends SIGTERM and waits for a clean exit.

use super::{Binary, ROUTER_NODE, ROUTER_TOOLS, TempDir};
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How long a process may take to start serving (a debug build on a loaded machine).
pub const START_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a process may take to exit after SIGTERM.
pub const STOP_TIMEOUT: Duration = Duration::from_secs(20);

/// How a process ended and what it printed.
#[derive(Debug)]
pub struct Stopped {
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

/// A child process whose stdout and stderr are read line by line on two threads.
#[derive(Debug)]
pub struct Proc {
    name: String,
    child: Child,
    lines: Receiver<String>,
    stdout: Arc<Mutex<String>>,
    stderr: Arc<Mutex<String>>,
    readers: Vec<JoinHandle<()>>,
}

impl Proc {
    /// Spawns `router-node args...`; `name` is how messages call it.
    pub fn spawn(name: &str, args: &[&str]) -> Self {
        Self::spawn_with_env(name, args, &[])
    }

    /// [`Self::spawn`] with environment variables set on the child (e.g. `OTEL_*`).
    pub fn spawn_with_env(name: &str, args: &[&str], env: &[(String, String)]) -> Self {
        Self::spawn_binary(ROUTER_NODE, name, args, env)
    }

    /// Spawns `router-tools args...` (`worker --sim`, `bench`, `demo`).
    pub fn spawn_tools(name: &str, args: &[&str]) -> Self {
        Self::spawn_binary(ROUTER_TOOLS, name, args, &[])
    }

    /// Spawns one of the workspace's binaries with `args`, and `env` set on the child.
    pub fn spawn_binary(
        binary: Binary,
        name: &str,
        args: &[&str],
        env: &[(String, String)],
    ) -> Self {
        let mut command = binary.command();
        command.args(args);
        command.envs(env.iter().map(|(k, v)| (k, v)));
        Self::spawn_command(name, command)
    }

    /// Spawns any `command` (e.g. HAProxy) with its output collected like a node's.
    pub fn spawn_command(name: &str, command: Command) -> Self {
        Self::try_spawn_command(name, command).unwrap_or_else(|e| panic!("{e}"))
    }

    /// [`Self::spawn_command`], with a command that cannot be started (a missing program, or a
    /// script whose interpreter is gone) as an error naming it.
    pub fn try_spawn_command(name: &str, mut command: Command) -> Result<Self, String> {
        let mut child = command
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| {
                format!(
                    "cannot start {name} ({}): {e}",
                    command.get_program().to_string_lossy()
                )
            })?;
        let (tx, lines) = mpsc::channel();
        let stdout = Arc::new(Mutex::new(String::new()));
        let stderr = Arc::new(Mutex::new(String::new()));
        let mut readers = Vec::new();
        if let Some(out) = child.stdout.take() {
            readers.push(read_lines(out, Arc::clone(&stdout), tx.clone()));
        }
        if let Some(err) = child.stderr.take() {
            readers.push(read_lines(err, Arc::clone(&stderr), tx));
        }
        Ok(Self {
            name: name.to_owned(),
            child,
            lines,
            stdout,
            stderr,
            readers,
        })
    }

    pub fn id(&self) -> u32 {
        self.child.id()
    }

    /// Whether it has exited (and how), without waiting.
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    /// The first output line (stdout or stderr) for which `pick` gives a value. Panics with
    /// the output so far when none comes within `timeout` or the process exits first.
    pub fn wait_for<T>(&mut self, timeout: Duration, mut pick: impl FnMut(&str) -> Option<T>) -> T {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    if let Some(value) = pick(&line) {
                        return value;
                    }
                }
                Err(_) => panic!(
                    "{} printed nothing expected within {timeout:?} (exit: {:?})\n{}",
                    self.name,
                    self.child.try_wait().ok().flatten(),
                    self.output()
                ),
            }
        }
    }

    /// Everything printed so far.
    pub fn output(&self) -> String {
        let read = |buf: &Arc<Mutex<String>>| buf.lock().map(|s| s.clone()).unwrap_or_default();
        format!(
            "--- stdout\n{}--- stderr\n{}",
            read(&self.stdout),
            read(&self.stderr)
        )
    }

    /// SIGKILL (a crash: no drain, no goodbye), then waits for the exit.
    pub fn kill(mut self) -> Stopped {
        let _ = self.child.kill();
        let status = self.child.wait();
        for reader in self.readers.drain(..) {
            let _ = reader.join();
        }
        let take = |buf: &Arc<Mutex<String>>| buf.lock().map(|s| s.clone()).unwrap_or_default();
        Stopped {
            code: status.ok().and_then(|s| s.code()),
            stdout: take(&self.stdout),
            stderr: take(&self.stderr),
        }
    }

    /// SIGTERM, then waits for the exit (killing it after [`STOP_TIMEOUT`]).
    pub fn stop(mut self) -> Stopped {
        let sent = std::process::Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        assert!(
            sent.is_ok_and(|s| s.success()),
            "cannot signal {}",
            self.name
        );
        let deadline = Instant::now() + STOP_TIMEOUT;
        let status = loop {
            match self.child.try_wait() {
                Ok(Some(status)) => break status,
                Ok(None) if Instant::now() < deadline => std::thread::sleep(POLL),
                _ => {
                    let _ = self.child.kill();
                    panic!(
                        "{} did not exit within {STOP_TIMEOUT:?} of SIGTERM\n{}",
                        self.name,
                        self.output()
                    );
                }
            }
        };
        for reader in self.readers.drain(..) {
            let _ = reader.join();
        }
        let take = |buf: &Arc<Mutex<String>>| buf.lock().map(|s| s.clone()).unwrap_or_default();
        Stopped {
            code: status.code(),
            stdout: take(&self.stdout),
            stderr: take(&self.stderr),
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        // `SWITCHYARD_TEST_LOGS=dir`: every process's whole output, kept for a look after
        // the run (`<name>-<pid>.log`).
        if let Some(dir) = std::env::var_os("SWITCHYARD_TEST_LOGS") {
            let dir = std::path::Path::new(&dir);
            let file = dir.join(format!("{}-{}.log", self.name, self.child.id()));
            if let Err(e) =
                std::fs::create_dir_all(dir).and_then(|()| std::fs::write(&file, self.output()))
            {
                eprintln!(
                    "cannot keep {}'s output in {}: {e}",
                    self.name,
                    file.display()
                );
            }
        }
    }
}

const POLL: Duration = Duration::from_millis(20);

fn read_lines(
    from: impl Read + Send + 'static,
    into: Arc<Mutex<String>>,
    tx: Sender<String>,
) -> JoinHandle<()> {
    std::thread::spawn(move || {
        for line in BufReader::new(from).lines() {
            let Ok(line) = line else { break };
            if let Ok(mut all) = into.lock() {
                all.push_str(&line);
                all.push('\n');
            }
            // The test may have stopped listening; the line is still kept above.
            let _ = tx.send(line);
        }
    })
}

/// Where a node's bus is.
#[derive(Debug, Clone)]
pub enum NodeBus {
    /// One process, no NATS (no workers from outside can join).
    InProcess,
    Nats(String),
}

/// Where a `serve` process listens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Serving {
    /// The public listener: `http://host:port` (the OpenAI API, `/health`, `/ready`).
    pub url: String,
    /// The admin listener: `http://host:port` (`/metrics`, `/debug/state`).
    pub admin_url: String,
}

/// A `router-node serve` process.
#[derive(Debug)]
pub struct RouterNode {
    proc: Proc,
    url: String,
    admin_url: String,
    config: PathBuf,
    /// Environment variables it was started with (kept for a restart).
    env: Vec<(String, String)>,
    _dir: TempDir,
}

impl RouterNode {
    /// Starts a node of `cluster` on `bus`, serving on 127.0.0.1 on ports of its own (the
    /// public and the admin listener), with JSON logs. `extra` is appended to its config file
    /// (any table but `[node]`, `[http]`, `[admin]`, `[bus]` and `[telemetry]`, which this
    /// writes). Returns once it serves HTTP.
    pub fn start(name: &str, cluster: &str, bus: &NodeBus, extra: &str) -> Self {
        Self::start_with_node(name, cluster, bus, "", extra)
    }

    /// [`Self::start`] with more `[node]` keys (`node_extra`, e.g. `block_size = 32`).
    pub fn start_with_node(
        name: &str,
        cluster: &str,
        bus: &NodeBus,
        node_extra: &str,
        extra: &str,
    ) -> Self {
        Self::start_with_http(name, cluster, bus, node_extra, "", extra)
    }

    /// [`Self::start_with_node`] with more `[http]` keys (`http_extra`, e.g.
    /// `shutdown_delay_ms = 1000`).
    pub fn start_with_http(
        name: &str,
        cluster: &str,
        bus: &NodeBus,
        node_extra: &str,
        http_extra: &str,
        extra: &str,
    ) -> Self {
        Self::start_with_env(name, cluster, bus, &[node_extra, http_extra, extra], &[])
    }

    /// [`Self::start_with_http`] (`keys` are `[node_extra, http_extra, extra]`) with
    /// environment variables set on the process (e.g. the `OTEL_*` ones).
    pub fn start_with_env(
        name: &str,
        cluster: &str,
        bus: &NodeBus,
        [node_extra, http_extra, extra]: &[&str; 3],
        env: &[(String, String)],
    ) -> Self {
        let dir = TempDir::new("node");
        let bus = match bus {
            NodeBus::InProcess => "kind = \"in-process\"".to_owned(),
            NodeBus::Nats(url) => format!("kind = \"nats\"\nnats_url = \"{url}\""),
        };
        let config = dir.write(
            "node.toml",
            &format!(
                "[node]\ncluster = \"{cluster}\"\n{node_extra}\n\n[http]\nlisten = \"127.0.0.1:0\"\n\
                 drain_timeout_ms = 10000\n{http_extra}\n\n[admin]\nlisten = \"127.0.0.1:0\"\n\n\
                 [bus]\n{bus}\n\n[telemetry]\nlog_format = \"json\"\n\n{extra}\n"
            ),
        );
        let (proc, serving) = Self::serve(name, &config, env);
        Self {
            proc,
            url: serving.url,
            admin_url: serving.admin_url,
            config,
            env: env.to_vec(),
            _dir: dir,
        }
    }

    /// Runs `serve --config <config>` and waits for the addresses it serves on.
    fn serve(name: &str, config: &Path, env: &[(String, String)]) -> (Proc, Serving) {
        let config_arg = config.to_string_lossy().into_owned();
        let mut proc = Proc::spawn_with_env(name, &["serve", "--config", &config_arg], env);
        let serving = Self::wait_serving(&mut proc);
        (proc, serving)
    }

    /// Waits until a `serve` process with JSON logs says where it serves the OpenAI API and
    /// its admin endpoints (one log line), and returns both as `http://host:port`.
    pub fn wait_serving(proc: &mut Proc) -> Serving {
        let (listen, admin) = proc.wait_for(START_TIMEOUT, |line| {
            let event: serde_json::Value = serde_json::from_str(line).ok()?;
            let fields = &event["fields"];
            if fields["message"] != "serving the OpenAI API" {
                return None;
            }
            let listen = fields["listen"].as_str()?.to_owned();
            let admin = fields["admin"].as_str()?.to_owned();
            Some((listen, admin))
        });
        Serving {
            url: format!("http://{listen}"),
            admin_url: format!("http://{admin}"),
        }
    }

    /// A rolling restart of this replica: SIGTERM (it drains), then the same configuration
    /// started again on the same addresses (public and admin, as a scraper expects). Returns
    /// the old process's exit and the new node.
    pub fn restart(self, name: &str) -> (Stopped, Self) {
        let Self {
            proc,
            url,
            admin_url,
            config,
            env,
            _dir,
        } = self;
        let stopped = proc.stop();
        let text = std::fs::read_to_string(&config).expect("the node's config file");
        // The first `listen` is `[http]`'s, the second `[admin]`'s.
        let mut pinned = text;
        for address in [&url, &admin_url] {
            let address = address.trim_start_matches("http://");
            pinned = pinned.replacen(
                "listen = \"127.0.0.1:0\"",
                &format!("listen = \"{address}\""),
                1,
            );
        }
        std::fs::write(&config, pinned).expect("the node's config file is writable");
        let (proc, serving) = Self::serve(name, &config, &env);
        (
            stopped,
            Self {
                proc,
                url: serving.url,
                admin_url: serving.admin_url,
                config,
                env,
                _dir,
            },
        )
    }

    /// The public listener, `http://127.0.0.1:<port>`: the OpenAI API, `/health`, `/ready`.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The admin listener, `http://127.0.0.1:<port>`: `/metrics`, `/debug/state`.
    pub fn admin_url(&self) -> &str {
        &self.admin_url
    }

    /// Its process id.
    pub fn id(&self) -> u32 {
        self.proc.id()
    }

    /// The config file it was started with.
    pub fn config(&self) -> &PathBuf {
        &self.config
    }

    pub fn output(&self) -> String {
        self.proc.output()
    }

    pub fn stop(self) -> Stopped {
        self.proc.stop()
    }

    /// SIGKILL: the replica dies with its requests in flight, saying nothing to its peers.
    pub fn kill(self) -> Stopped {
        self.proc.kill()
    }
}

/// A `router-tools worker --sim` process.
#[derive(Debug)]
pub struct SimWorker {
    proc: Proc,
    url: String,
}

impl SimWorker {
    /// Starts a simulated worker with `args` after `worker --sim --listen 127.0.0.1:0`
    /// (`--standalone`, or `--nats URL --cluster C --worker-id N ...`). Returns once it
    /// serves HTTP.
    pub fn start(name: &str, args: &[&str]) -> Self {
        Self::start_with_env(name, args, &[])
    }

    /// [`Self::start`] with environment variables set on the process (e.g. `OTEL_*`).
    pub fn start_with_env(name: &str, args: &[&str], env: &[(String, String)]) -> Self {
        let mut all = vec!["worker", "--sim", "--listen", "127.0.0.1:0"];
        all.extend_from_slice(args);
        let mut proc = Proc::spawn_binary(ROUTER_TOOLS, name, &all, env);
        let url = proc.wait_for(START_TIMEOUT, |line| {
            line.split_whitespace()
                .find(|w| w.starts_with("http://"))
                .map(str::to_owned)
        });
        Self { proc, url }
    }

    /// Its OpenAI-compatible base URL.
    pub fn url(&self) -> &str {
        &self.url
    }

    pub fn id(&self) -> u32 {
        self.proc.id()
    }

    /// SIGKILL: the worker dies with its streams in flight.
    pub fn kill(self) -> Stopped {
        self.proc.kill()
    }

    pub fn output(&self) -> String {
        self.proc.output()
    }

    pub fn stop(self) -> Stopped {
        self.proc.stop()
    }
}

/// A `router-node link` sidecar in front of one real engine.
#[derive(Debug)]
pub struct LinkSidecar {
    proc: Proc,
}

impl LinkSidecar {
    /// Starts `router-node link` with `args` (`--engine vllm --url ... --nats ...`); returns
    /// once it has said which worker the engine is.
    pub fn start(name: &str, args: &[&str]) -> Self {
        let mut all = vec!["link"];
        all.extend_from_slice(args);
        let mut proc = Proc::spawn(name, &all);
        proc.wait_for(START_TIMEOUT, |line| {
            line.starts_with("router-node link:").then_some(())
        });
        Self { proc }
    }

    pub fn output(&self) -> String {
        self.proc.output()
    }

    pub fn stop(self) -> Stopped {
        self.proc.stop()
    }
}
