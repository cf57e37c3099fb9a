//! Build script: names the build for the `switchyard_build_info` metric. Sets
//! `SWITCHYARD_GIT_SHA` (the commit checked out, 12 hex digits; `SWITCHYARD_GIT_SHA` from the
//! environment wins, for builds without a `.git`, e.g. an image; `unknown` when neither is
//! there) and `SWITCHYARD_RUSTC_VERSION` (`rustc --version` of the compiler Cargo uses).

use std::path::Path;
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-env-changed=SWITCHYARD_GIT_SHA");
    let sha = std::env::var("SWITCHYARD_GIT_SHA")
        .ok()
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty())
        .or_else(git_sha)
        .unwrap_or_else(|| "unknown".to_owned());
    println!("cargo:rustc-env=SWITCHYARD_GIT_SHA={sha}");

    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".to_owned());
    let version =
        output(Command::new(rustc).arg("--version")).unwrap_or_else(|| "rustc unknown".to_owned());
    println!("cargo:rustc-env=SWITCHYARD_RUSTC_VERSION={version}");
}

/// Trimmed stdout of a command that succeeded.
fn output(command: &mut Command) -> Option<String> {
    let out = command.output().ok()?;
    if !out.status.success() {
        return None;
    }
    let text = String::from_utf8(out.stdout).ok()?.trim().to_owned();
    (!text.is_empty()).then_some(text)
}

fn git(args: &[&str]) -> Option<String> {
    output(Command::new("git").args(args))
}

/// The commit checked out; the build script runs again when HEAD moves (HEAD itself, the
/// branch it names, packed refs).
fn git_sha() -> Option<String> {
    let sha = git(&["rev-parse", "--short=12", "HEAD"])?;
    let mut watched = Vec::new();
    if let Some(dir) = git(&["rev-parse", "--path-format=absolute", "--git-dir"]) {
        watched.push(Path::new(&dir).join("HEAD"));
    }
    if let Some(common) = git(&["rev-parse", "--path-format=absolute", "--git-common-dir"]) {
        let common = Path::new(&common);
        watched.push(common.join("packed-refs"));
        if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"]) {
            watched.push(common.join(branch));
        }
    }
    // A path that does not exist would make Cargo run this script on every build.
    for path in watched.iter().filter(|p| p.exists()) {
        println!("cargo:rerun-if-changed={}", path.display());
    }
    Some(sha)
}
