//! What the whole-system tests share: the `router-node` and `router-tools` binaries,
//! scratch directories, one-shot runs of a binary, and long-running processes ([`process`]):
//! a nats-server, router nodes and simulated workers, each on a port it picks itself; HAProxy
//! ([`haproxy`]); the cluster harness that puts them together ([`cluster`]) and reads a
//! running fleet ([`observe`]); Arize Phoenix, a real trace backend ([`phoenix`]).
//!
//! # Which binaries
//!
//! The serving binary `router-node` (`serve`, `link`, `keys`, `print-config`) and the tools
//! binary `router-tools` (`demo`, `worker --sim`, `bench`, `trace synth`). Cargo gives a test
//! the path of a binary only from the binary's own package (`CARGO_BIN_EXE_<name>`), and a
//! test must not run `cargo build` itself (the outer cargo may hold the build lock, and a
//! build with other features would replace the binary under the other tests). So
//! [`Binary::path`] takes, in this order:
//!
//! 1. the binary's variable when set (`$SWITCHYARD_ROUTER_NODE_BIN`,
//!    `$SWITCHYARD_ROUTER_TOOLS_BIN`; any build, e.g. a release binary);
//! 2. the binary in the profile directory of this test executable
//!    (`target/<profile>/deps/<test>` → `target/<profile>/router-node`; for a binary of this
//!    crate, `target/<profile>/cluster-burst` → the same), which
//!    `cargo test --workspace` (and so `scripts/test.sh`) builds before it runs any test.
//!
//! A missing binary fails the test with the command that fixes it (`cargo build -p
//! router-node`). So does one older than a source file it was built from, when Cargo's
//! dep-info about it (`target/<profile>/router-node.d`, which `cargo build` writes) is there:
//! a test never runs old code unnoticed after `cargo build`, and `cargo test --workspace`
//! rebuilds the binary before any test runs.

pub mod certs;
pub mod cluster;
pub mod cpu;
pub mod haproxy;
pub mod observe;
pub mod phoenix;
pub mod process;
pub mod vllm;

pub use cluster::{Cluster, ClusterBuilder, ClusterWorker, Role};
pub use haproxy::{Haproxy, HaproxyConfig};
pub use phoenix::Phoenix;
pub use process::{LinkSidecar, NodeBus, Proc, RouterNode, Serving, SimWorker, Stopped};
pub use router_actors::testkit::NatsServer;
pub use vllm::VllmEngine;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;
use std::time::SystemTime;

/// One of the workspace's binaries under test.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Binary {
    /// The binary's (and its package's) name.
    pub name: &'static str,
    /// The variable that overrides where it is.
    pub env: &'static str,
}

/// The serving binary: `serve`, `link`, `keys`, `print-config`.
pub const ROUTER_NODE: Binary = Binary {
    name: "router-node",
    env: "SWITCHYARD_ROUTER_NODE_BIN",
};

/// The tools binary: `demo`, `worker --sim`, `bench`, `trace synth`.
pub const ROUTER_TOOLS: Binary = Binary {
    name: "router-tools",
    env: "SWITCHYARD_ROUTER_TOOLS_BIN",
};

/// Overrides where the `router-node` binary is.
pub const BIN_ENV: &str = ROUTER_NODE.env;

/// Environment variables a node (or a worker) reads besides the rule's
/// `SWITCHYARD_<SECTION>__<KEY>`: the config file's path, the older aliases and the standard
/// `OTEL_*` ones. These and every variable of the rule are removed from every child so the
/// caller's shell cannot change a test ([`is_node_env`]; a test sets them on a child
/// explicitly).
pub const NODE_ENV: &[&str] = &[
    "SWITCHYARD_CONFIG",
    "SWITCHYARD_CLUSTER",
    "SWITCHYARD_HTTP_LISTEN",
    "SWITCHYARD_NATS_URL",
    "SWITCHYARD_OTLP_ENDPOINT",
    "OTEL_SDK_DISABLED",
    "OTEL_TRACES_EXPORTER",
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_EXPORTER_OTLP_PROTOCOL",
    "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
    "OTEL_SERVICE_NAME",
    "OTEL_RESOURCE_ATTRIBUTES",
    "OTEL_TRACES_SAMPLER",
    "OTEL_TRACES_SAMPLER_ARG",
];

/// The rule's prefix and separator (`router_node::config::{ENV_PREFIX, ENV_SEPARATOR}`; this
/// crate's library does not link router-node, and `serve_cli.rs` checks they agree).
pub const NODE_ENV_RULE: (&str, &str) = ("SWITCHYARD_", "__");

/// Whether a node reads the variable `name` (see [`NODE_ENV`]).
pub fn is_node_env(name: &str) -> bool {
    let (prefix, separator) = NODE_ENV_RULE;
    NODE_ENV.contains(&name)
        || name
            .strip_prefix(prefix)
            .is_some_and(|rest| rest.contains(separator))
}

impl Binary {
    /// The binary under test (see the module doc). Panics with the fix when there is none or
    /// it is older than the sources.
    pub fn path(self) -> &'static Path {
        self.try_path()
            .unwrap_or_else(|message| panic!("{message}"))
    }

    /// [`Binary::path`] without the panic: the binary, or what is wrong with it and the fix
    /// (for a command to report before it starts anything).
    pub fn try_path(self) -> Result<&'static Path, String> {
        static NODE: OnceLock<Result<PathBuf, String>> = OnceLock::new();
        static TOOLS: OnceLock<Result<PathBuf, String>> = OnceLock::new();
        let cell = if self == ROUTER_TOOLS { &TOOLS } else { &NODE };
        cell.get_or_init(|| locate(self))
            .as_deref()
            .map_err(Clone::clone)
    }

    /// A command running this binary with the node's environment variables removed.
    pub fn command(self) -> Command {
        let mut command = Command::new(self.path());
        for (var, _) in std::env::vars_os() {
            if var.to_str().is_some_and(is_node_env) {
                command.env_remove(var);
            }
        }
        command
    }

    /// Runs this binary with `args` to the end.
    pub fn run(self, args: &[&str]) -> Output {
        self.command()
            .args(args)
            .output()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", self.path().display()))
    }
}

/// The `router-node` binary under test ([`Binary::path`]).
pub fn router_node_bin() -> &'static Path {
    ROUTER_NODE.path()
}

/// The `router-tools` binary under test ([`Binary::path`]).
pub fn router_tools_bin() -> &'static Path {
    ROUTER_TOOLS.path()
}

/// [`router_node_bin`] without the panic.
pub fn try_router_node_bin() -> Result<&'static Path, String> {
    ROUTER_NODE.try_path()
}

/// The workspace's root directory (this crate sits in `tests/`).
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// A `router-node` command with the node's environment variables removed.
pub fn router_node() -> Command {
    ROUTER_NODE.command()
}

/// A `router-tools` command with the node's environment variables removed.
pub fn router_tools() -> Command {
    ROUTER_TOOLS.command()
}

/// Runs `router-node args...` to the end.
pub fn run(args: &[&str]) -> Output {
    ROUTER_NODE.run(args)
}

/// Runs `router-tools args...` to the end.
pub fn run_tools(args: &[&str]) -> Output {
    ROUTER_TOOLS.run(args)
}

/// A port nobody listens on right now (bound, then released: for programs that cannot bind
/// port 0 and report it, such as vLLM and HAProxy).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or_else(|e| panic!("no free port: {e}"))
}

/// A fresh directory under the system's temp dir, removed on drop.
#[derive(Debug)]
pub struct TempDir(PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> Self {
        let dir = std::env::temp_dir().join(format!(
            "switchyard-system-{tag}-{}",
            uuid::Uuid::new_v4().simple()
        ));
        std::fs::create_dir_all(&dir)
            .unwrap_or_else(|e| panic!("cannot create {}: {e}", dir.display()));
        Self(dir)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }

    /// Writes `text` to `name` in the directory and returns its path.
    pub fn write(&self, name: &str, text: &str) -> PathBuf {
        let path = self.0.join(name);
        std::fs::write(&path, text)
            .unwrap_or_else(|e| panic!("cannot write {}: {e}", path.display()));
        path
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn locate(binary: Binary) -> Result<PathBuf, String> {
    let (name, env) = (binary.name, binary.env);
    if let Some(path) = std::env::var_os(env) {
        let path = PathBuf::from(path);
        return if path.is_file() {
            Ok(path)
        } else {
            Err(format!("{env}={} is not a file", path.display()))
        };
    }
    let exe = std::env::current_exe().map_err(|e| format!("cannot find this test: {e}"))?;
    // A test runs from target/<profile>/deps, a binary of this crate (`cluster-burst`) from
    // target/<profile>.
    let profile_dir = exe
        .parent()
        .and_then(|dir| match dir.file_name() {
            Some(name) if name == "deps" => dir.parent(),
            _ => Some(dir),
        })
        .ok_or_else(|| format!("{} is not in target/<profile>/deps", exe.display()))?;
    let bin = profile_dir.join(format!("{name}{}", std::env::consts::EXE_SUFFIX));
    let fix = format!(
        "build it with `cargo build -p {name}` (the profile of these tests: {}), run \
         `cargo test --workspace`, or set {env}",
        profile_dir.display()
    );
    let built = std::fs::metadata(&bin)
        .and_then(|m| m.modified())
        .map_err(|e| format!("no {name} binary at {} ({e}): {fix}", bin.display()))?;
    if let Some(source) = newer_source(&bin, name, built) {
        return Err(format!(
            "the {name} binary at {} is older than {}: {fix}",
            bin.display(),
            source.display()
        ));
    }
    Ok(bin)
}

/// A source file the binary was built from that changed since: Cargo's dep-info next to the
/// binary (`<name>.d`, written by `cargo build`) lists every file of the workspace that
/// went into it. No dep-info, or one about another binary (a copied target directory), no
/// check.
fn newer_source(bin: &Path, name: &str, built: SystemTime) -> Option<PathBuf> {
    let dep_info = std::fs::read_to_string(bin.with_file_name(format!("{name}.d"))).ok()?;
    let (target, sources) = dep_info.lines().next()?.split_once(": ")?;
    let same = |a: &Path, b: &Path| a.canonicalize().ok() == b.canonicalize().ok();
    if !same(Path::new(&target.replace("\\ ", " ")), bin) {
        return None;
    }
    // Spaces inside a path are escaped as `\ `.
    let sources = sources.replace("\\ ", "\u{0}");
    sources
        .split_whitespace()
        .map(|s| PathBuf::from(s.replace('\u{0}', " ")))
        .find(|path| {
            std::fs::metadata(path)
                .and_then(|m| m.modified())
                .is_ok_and(|changed| changed > built)
        })
}
