//! Real vLLM engines for the real-engine suite: the CPU build installed by
//! `scripts/install-vllm.sh` into `.tools/vllm`, the tiny local model made by
//! `scripts/make-tiny-model.py` in `.tools/models/tiny-llama`, each engine started by
//! `scripts/start-vllm.sh` on ports picked here (HTTP, KV events, replay) and stopped by
//! `scripts/stop-vllm.sh` (the engine runs as a process group of three processes).
//!
//! [`VllmEngine::kill`] is a SIGKILL of the whole group, as a crash would be;
//! [`VllmEngine::restart`] starts it again on the same ports.

use super::{TempDir, free_port, workspace_root};
use std::path::PathBuf;
use std::process::Command;

/// The tiny model every engine serves (and whose tokenizer the routers read), as an absolute
/// path without `..`: vLLM names the model by the path it was given.
pub fn tiny_model() -> PathBuf {
    let path = workspace_root().join(".tools/models/tiny-llama");
    path.canonicalize().unwrap_or(path)
}

/// Panics with the commands that set things up when vLLM or the model is missing.
pub fn require_vllm() {
    let python = workspace_root().join(".tools/vllm/bin/python");
    assert!(
        python.exists() && tiny_model().join("tokenizer.json").exists(),
        "the real-engine suite needs vLLM and the tiny model: run scripts/test-real-engines.sh \
         (or scripts/install-vllm.sh and .tools/vllm/bin/python scripts/make-tiny-model.py \
         .tools/models/tiny-llama)"
    );
}

/// The second tiny model (another tokenizer: 600 tokens) and its LoRA adapter, made by
/// `scripts/make-tiny-model.py .tools/models/tiny-llama-b --vocab-size 600 --lora-out
/// .tools/models/tiny-llama-b-lora`.
pub fn tiny_model_b() -> PathBuf {
    let path = workspace_root().join(".tools/models/tiny-llama-b");
    path.canonicalize().unwrap_or(path)
}

/// The LoRA adapter of [`tiny_model_b`].
pub fn tiny_lora_b() -> PathBuf {
    let path = workspace_root().join(".tools/models/tiny-llama-b-lora");
    path.canonicalize().unwrap_or(path)
}

/// How one engine is started besides its name.
#[derive(Debug, Clone, Default)]
pub struct EngineOptions {
    /// The model directory (default: [`tiny_model`]).
    pub model: Option<PathBuf>,
    pub num_gpu_blocks: Option<u32>,
    /// The publisher gets a concrete address, which vLLM connects to: the link must bind.
    pub kv_connect: bool,
    /// More vLLM arguments, last (`--block-size 64`, `--enable-lora`, ...).
    pub extra: Vec<String>,
}

/// One running (or killed) engine.
#[derive(Debug)]
pub struct VllmEngine {
    pub name: String,
    pub port: u16,
    pub kv_port: u16,
    pub replay_port: u16,
    options: EngineOptions,
    dir: TempDir,
}

impl VllmEngine {
    /// Starts an engine and returns once its `/health` answers (up to the script's timeout).
    /// An engine that exits before serving is started once more on fresh ports: two CPU
    /// engines starting side by side have, rarely, failed their engine core's start-up (a
    /// port another process took between our pick and vLLM's bind).
    pub fn start(name: &str, num_gpu_blocks: Option<u32>) -> Self {
        Self::start_with(
            name,
            EngineOptions {
                num_gpu_blocks,
                ..EngineOptions::default()
            },
        )
    }

    /// [`VllmEngine::start`] with `options`.
    pub fn start_with(name: &str, options: EngineOptions) -> Self {
        let attempt = || {
            let engine = Self {
                name: name.to_owned(),
                port: free_port(),
                kv_port: free_port(),
                replay_port: free_port(),
                options: options.clone(),
                dir: TempDir::new("vllm"),
            };
            engine.launch().map(|()| engine)
        };
        attempt().unwrap_or_else(|first| {
            eprintln!("{name}: the engine did not start, once more on fresh ports:\n{first}");
            attempt().unwrap_or_else(|second| panic!("{second}"))
        })
    }

    /// Starts several engines with their options at once (start-up is mostly Python
    /// imports: in parallel).
    pub fn start_all_with(specs: &[(&str, EngineOptions)]) -> Vec<Self> {
        std::thread::scope(|s| {
            let handles: Vec<_> = specs
                .iter()
                .map(|(name, options)| s.spawn(move || Self::start_with(name, options.clone())))
                .collect();
            handles
                .into_iter()
                .map(|h| {
                    h.join()
                        .unwrap_or_else(|_| panic!("an engine failed to start"))
                })
                .collect()
        })
    }

    /// Starts several engines at once (start-up is mostly Python imports: in parallel).
    pub fn start_all(specs: &[(&str, Option<u32>)]) -> Vec<Self> {
        let specs: Vec<(&str, EngineOptions)> = specs
            .iter()
            .map(|(name, num_gpu_blocks)| {
                let options = EngineOptions {
                    num_gpu_blocks: *num_gpu_blocks,
                    ..EngineOptions::default()
                };
                (*name, options)
            })
            .collect();
        Self::start_all_with(&specs)
    }

    fn launch(&self) -> Result<(), String> {
        let mut command = Command::new(workspace_root().join("scripts/start-vllm.sh"));
        let model = self.options.model.clone().unwrap_or_else(tiny_model);
        command
            .arg("--model")
            .arg(model)
            .args(["--port", &self.port.to_string()])
            .args(["--kv-port", &self.kv_port.to_string()])
            .args(["--replay-port", &self.replay_port.to_string()])
            .arg("--run-dir")
            .arg(self.dir.path());
        if let Some(blocks) = self.options.num_gpu_blocks {
            command.args(["--num-gpu-blocks", &blocks.to_string()]);
        }
        if self.options.kv_connect {
            command.arg("--kv-connect");
        }
        if !self.options.extra.is_empty() {
            command.arg("--").args(&self.options.extra);
        }
        let out = command
            .output()
            .unwrap_or_else(|e| panic!("cannot run scripts/start-vllm.sh: {e}"));
        if out.status.success() {
            return Ok(());
        }
        Err(format!(
            "{}: start-vllm.sh failed:\n{}\n{}",
            self.name,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ))
    }

    /// `http://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    pub fn kv_events(&self) -> String {
        format!("tcp://127.0.0.1:{}", self.kv_port)
    }

    pub fn replay(&self) -> String {
        format!("tcp://127.0.0.1:{}", self.replay_port)
    }

    fn pid_file(&self) -> PathBuf {
        self.dir.path().join(format!("vllm-{}.pid", self.port))
    }

    /// The engine's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join(format!("vllm-{}.log", self.port)))
            .unwrap_or_default()
    }

    /// SIGKILL to the engine's whole process group, as a crash.
    pub fn kill(&self) {
        let pgid = std::fs::read_to_string(self.pid_file()).unwrap_or_default();
        let pgid = pgid.trim();
        assert!(!pgid.is_empty(), "{}: no pid file", self.name);
        let _ = Command::new("kill")
            .args(["-KILL", "--", &format!("-{pgid}")])
            .status();
        // Dead once gone or a zombie (this machine's init may not reap it); its sockets are
        // closed either way, so the engine can start again on the same ports.
        let stat = format!("/proc/{pgid}/stat");
        for _ in 0..100 {
            let state = std::fs::read_to_string(&stat).unwrap_or_default();
            if state.is_empty() || state.contains(") Z ") {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
    }

    /// Starts the engine again on the same ports.
    pub fn restart(&self) {
        self.launch().unwrap_or_else(|e| panic!("{e}"));
    }

    fn stop(&self) {
        let _ = Command::new(workspace_root().join("scripts/stop-vllm.sh"))
            .arg(self.pid_file())
            .output();
    }
}

impl Drop for VllmEngine {
    fn drop(&mut self) {
        self.stop();
    }
}
