//! Throw-away TLS material for the NATS security tests, made at test time with the `openssl`
//! command: a CA, a server certificate for `127.0.0.1` / `localhost` signed by it, and a
//! client certificate signed by it (for mutual TLS). Keys are P-256. Nothing is kept beyond
//! the [`TempDir`] that holds them.
//!
//! `openssl` (1.1.1 or 3.x) must be on `PATH` (`$OPENSSL_BIN` overrides); without one the test
//! fails saying so (Debian: `apt-get install openssl`).

use super::TempDir;
use std::path::{Path, PathBuf};
use std::process::Command;

/// PEM files in one directory.
#[derive(Debug)]
pub struct TestPki {
    pub ca: PathBuf,
    pub server_cert: PathBuf,
    pub server_key: PathBuf,
    pub client_cert: PathBuf,
    pub client_key: PathBuf,
    /// A second CA that signed nothing here: a client trusting only it must refuse the server.
    pub other_ca: PathBuf,
}

fn openssl() -> String {
    std::env::var("OPENSSL_BIN").unwrap_or_else(|_| "openssl".to_owned())
}

fn run(dir: &Path, args: &[&str]) {
    let out = Command::new(openssl())
        .current_dir(dir)
        .args(args)
        .output()
        .unwrap_or_else(|e| {
            panic!(
                "cannot run `{} {}`: {e}; the TLS tests make their certificates with the \
                 openssl command (apt-get install openssl, or set OPENSSL_BIN)",
                openssl(),
                args.join(" ")
            )
        });
    assert!(
        out.status.success(),
        "`openssl {}` failed: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A self-signed CA `name` (`<name>.pem`, `<name>-key.pem`).
fn ca(dir: &Path, name: &str) {
    run(
        dir,
        &[
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
            "-keyout",
            &format!("{name}-key.pem"),
            "-out",
            &format!("{name}.pem"),
            "-days",
            "2",
            "-subj",
            &format!("/CN=Switchyard test {name}"),
        ],
    );
}

/// A leaf `name` signed by CA `ca` with the extensions `ext` (an openssl extfile's lines).
fn leaf(dir: &Path, ca: &str, name: &str, cn: &str, ext: &str) {
    run(
        dir,
        &[
            "req",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
            "-keyout",
            &format!("{name}-key.pem"),
            "-out",
            &format!("{name}.csr"),
            "-subj",
            &format!("/CN={cn}"),
        ],
    );
    let ext_file = format!("{name}.ext");
    std::fs::write(dir.join(&ext_file), ext).expect("write the extensions file");
    run(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            &format!("{name}.csr"),
            "-CA",
            &format!("{ca}.pem"),
            "-CAkey",
            &format!("{ca}-key.pem"),
            "-CAcreateserial",
            "-out",
            &format!("{name}.pem"),
            "-days",
            "2",
            "-extfile",
            &ext_file,
        ],
    );
}

impl TestPki {
    /// Makes the CA, the server and client certificates, and an unrelated CA, in `dir`.
    pub fn generate(dir: &TempDir) -> Self {
        let d = dir.path();
        ca(d, "ca");
        ca(d, "other-ca");
        leaf(
            d,
            "ca",
            "server",
            "localhost",
            "subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n",
        );
        leaf(
            d,
            "ca",
            "client",
            "switchyard-client",
            "extendedKeyUsage=clientAuth\n",
        );
        Self {
            ca: d.join("ca.pem"),
            server_cert: d.join("server.pem"),
            server_key: d.join("server-key.pem"),
            client_cert: d.join("client.pem"),
            client_key: d.join("client-key.pem"),
            other_ca: d.join("other-ca.pem"),
        }
    }
}
