//! How a NATS connection authenticates and is encrypted: the options a node, a simulated
//! worker or an engine link passes to [`super::nats::NatsBus::connect_secured`].
//!
//! - **Authentication**, at most one method: a credentials file (a user JWT and its nkey seed,
//!   as `nsc` writes them), an nkey seed file, a user name with a password file, or a token
//!   file. Secrets are read from files (never from the command line or the config file
//!   itself); one trailing newline is dropped. Credentials inside the URL
//!   (`nats://user:pass@host`) still work and are the server's business.
//! - **TLS**: `required` refuses a server that does not offer TLS; `ca_file` is the CA the
//!   server's certificate must chain to (instead of the system's roots); `cert_file` and
//!   `key_file` are the client certificate the server may demand (mutual TLS), both or neither.
//!   A `tls://` URL requires TLS as well.
//!
//! Every file is named in errors by the caller's own name for it (a config key such as
//! `bus.auth.password_file`, or a flag such as `--nats-password-file`), and every file is
//! checked before any connection is made. At connection time, a refused authentication is
//! [`NatsConnectError::Auth`], a failed TLS set-up or handshake [`NatsConnectError::Tls`]:
//! both end the attempt at once (no background retry that would look like a hang).

use std::path::{Path, PathBuf};
use std::time::Duration;

/// A file the caller names in errors by `name` (its config key or its flag).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NamedFile {
    pub name: String,
    pub path: PathBuf,
}

impl NamedFile {
    pub fn new(name: impl Into<String>, path: impl Into<PathBuf>) -> Self {
        Self {
            name: name.into(),
            path: path.into(),
        }
    }
}

/// How the client proves who it is.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum NatsAuth {
    /// No credentials beyond any in the URL.
    #[default]
    None,
    /// A `.creds` file: a user JWT and its nkey seed (decentralised auth, operator mode).
    CredentialsFile(NamedFile),
    /// A file holding one user nkey seed (`SU...`); the server knows its public key.
    NkeySeedFile(NamedFile),
    /// A user name and the file holding its password.
    UserPassword { user: String, password: NamedFile },
    /// A file holding the server's token.
    TokenFile(NamedFile),
}

/// TLS settings of the connection.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NatsTls {
    /// Refuse a server that does not offer TLS.
    pub required: bool,
    /// The CA (PEM) the server's certificate must chain to; absent: the system's roots.
    pub ca: Option<NamedFile>,
    /// The client certificate chain (PEM) for mutual TLS; needs `key`.
    pub cert: Option<NamedFile>,
    /// The client certificate's private key (PEM); needs `cert`.
    pub key: Option<NamedFile>,
}

impl NatsTls {
    /// Any TLS setting given.
    pub fn enabled(&self) -> bool {
        self.required || self.ca.is_some() || self.cert.is_some() || self.key.is_some()
    }
}

/// Authentication and TLS of one NATS connection. The default is neither (as before: a
/// plain connection, credentials only in the URL).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NatsSecurity {
    pub auth: NatsAuth,
    pub tls: NatsTls,
    /// Bound on establishing the connection (TCP, TLS and the server's answer to CONNECT).
    pub connect_timeout: Option<Duration>,
}

/// Why a secured connection could not be made. The URL is not included (it may carry
/// credentials): callers add a redacted one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NatsConnectError {
    /// A file named in the settings is missing, unreadable or not what it should be.
    #[error("{name} {path}: {reason}")]
    File {
        name: String,
        path: PathBuf,
        reason: String,
    },
    /// Settings that contradict each other.
    #[error("{0}")]
    Settings(String),
    /// The server refused the credentials.
    #[error("authentication failed: {0} (check the NATS credentials)")]
    Auth(String),
    /// The TLS set-up or handshake failed (untrusted server certificate, wrong CA, a server
    /// without TLS while it is required, a client certificate the server refused).
    #[error("TLS failed: {0}")]
    Tls(String),
    /// Anything else: unreachable, timed out, a bad URL.
    #[error("{0}")]
    Connect(String),
}

impl NatsSecurity {
    /// Checks every file and builds the client options. Nothing is sent.
    pub async fn connect_options(&self) -> Result<async_nats::ConnectOptions, NatsConnectError> {
        let mut options = async_nats::ConnectOptions::new();
        if let Some(timeout) = self.connect_timeout {
            options = options.connection_timeout(timeout);
        }
        options = match &self.auth {
            NatsAuth::None => options,
            NatsAuth::CredentialsFile(file) => {
                readable(file).await?;
                options
                    .credentials_file(&file.path)
                    .await
                    .map_err(|e| file_error(file, format!("not a NATS credentials file: {e}")))?
            }
            NatsAuth::NkeySeedFile(file) => {
                let seed = read_secret(file).await?;
                nkeys::KeyPair::from_seed(&seed).map_err(|e| {
                    file_error(file, format!("not an nkey seed (expected SU...): {e}"))
                })?;
                options.nkey(seed)
            }
            NatsAuth::UserPassword { user, password } => {
                if user.is_empty() {
                    return Err(NatsConnectError::Settings(format!(
                        "a user name is needed with {}",
                        password.name
                    )));
                }
                let password = read_secret(password).await?;
                options.user_and_password(user.clone(), password)
            }
            NatsAuth::TokenFile(file) => options.token(read_secret(file).await?),
        };
        let tls = &self.tls;
        if tls.required {
            options = options.require_tls(true);
        }
        if let Some(ca) = &tls.ca {
            readable(ca).await?;
            options = options.add_root_certificates(ca.path.clone());
        }
        match (&tls.cert, &tls.key) {
            (Some(cert), Some(key)) => {
                readable(cert).await?;
                readable(key).await?;
                options = options.add_client_certificate(cert.path.clone(), key.path.clone());
            }
            (None, None) => {}
            (Some(only), None) | (None, Some(only)) => {
                return Err(NatsConnectError::Settings(format!(
                    "{} is set alone: a client certificate needs both its certificate and its key",
                    only.name
                )));
            }
        }
        Ok(options)
    }

    /// Connects to `url` (one attempt, see the module doc).
    pub async fn connect(&self, url: &str) -> Result<async_nats::Client, NatsConnectError> {
        let options = self.connect_options().await?;
        options.connect(url).await.map_err(classify)
    }
}

/// `url` with any user info (`user:password@`) replaced by `***@`, for messages and logs.
pub fn redact_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let authority_end = rest.find('/').unwrap_or(rest.len());
    match rest[..authority_end].rfind('@') {
        Some(at) => format!("{scheme}://***@{}", &rest[at + 1..]),
        None => url.to_owned(),
    }
}

/// A refused authentication, a TLS failure, or anything else.
fn classify(error: async_nats::ConnectError) -> NatsConnectError {
    use async_nats::ConnectErrorKind as Kind;
    let text = error.to_string();
    match error.kind() {
        Kind::AuthorizationViolation | Kind::Authentication => NatsConnectError::Auth(text),
        Kind::Tls => NatsConnectError::Tls(text),
        // A handshake that fails reaches the client as an I/O error of the TLS stream.
        _ if looks_like_tls(&text) => NatsConnectError::Tls(text),
        _ => NatsConnectError::Connect(text),
    }
}

fn looks_like_tls(text: &str) -> bool {
    let lower = text.to_ascii_lowercase();
    ["certificate", "tls", "handshake", "unknownissuer"]
        .iter()
        .any(|needle| lower.contains(needle))
}

fn file_error(file: &NamedFile, reason: impl Into<String>) -> NatsConnectError {
    NatsConnectError::File {
        name: file.name.clone(),
        path: file.path.clone(),
        reason: reason.into(),
    }
}

async fn readable(file: &NamedFile) -> Result<(), NatsConnectError> {
    read(file).await.map(|_| ())
}

async fn read(file: &NamedFile) -> Result<String, NatsConnectError> {
    tokio::fs::read_to_string(&file.path)
        .await
        .map_err(|e| file_error(file, describe_io(&file.path, &e)))
}

/// A secret file's content without its trailing line break; an empty one is an error.
async fn read_secret(file: &NamedFile) -> Result<String, NatsConnectError> {
    let text = read(file).await?;
    let secret = text.strip_suffix('\n').unwrap_or(&text);
    let secret = secret.strip_suffix('\r').unwrap_or(secret);
    if secret.trim().is_empty() {
        return Err(file_error(file, "is empty"));
    }
    Ok(secret.to_owned())
}

fn describe_io(path: &Path, e: &std::io::Error) -> String {
    match e.kind() {
        std::io::ErrorKind::NotFound => "does not exist".to_owned(),
        std::io::ErrorKind::PermissionDenied => "cannot be read (permission denied)".to_owned(),
        _ if path.is_dir() => "is a directory".to_owned(),
        _ => format!("cannot be read: {e}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A scratch directory, removed on drop.
    struct Scratch(PathBuf);

    impl Scratch {
        fn new() -> Self {
            let dir =
                std::env::temp_dir().join(format!("switchyard-nats-sec-{}", uuid::Uuid::new_v4()));
            std::fs::create_dir_all(&dir).expect("temp dir");
            Self(dir)
        }

        fn file(&self, name: &str, content: &str) -> PathBuf {
            let path = self.0.join(name);
            std::fs::write(&path, content).expect("write");
            path
        }
    }

    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    async fn error_of(security: NatsSecurity) -> NatsConnectError {
        security
            .connect_options()
            .await
            .expect_err("the settings must be refused")
    }

    #[tokio::test]
    async fn a_missing_file_is_named_by_the_callers_name_for_it() {
        let missing = std::env::temp_dir().join("switchyard-no-such-file.pem");
        let cases = [
            NatsAuth::CredentialsFile(NamedFile::new("bus.auth.credentials_file", &missing)),
            NatsAuth::NkeySeedFile(NamedFile::new("bus.auth.nkey_seed_file", &missing)),
            NatsAuth::UserPassword {
                user: "router".into(),
                password: NamedFile::new("bus.auth.password_file", &missing),
            },
            NatsAuth::TokenFile(NamedFile::new("bus.auth.token_file", &missing)),
        ];
        for auth in cases {
            let expected = match &auth {
                NatsAuth::CredentialsFile(f)
                | NatsAuth::NkeySeedFile(f)
                | NatsAuth::TokenFile(f)
                | NatsAuth::UserPassword { password: f, .. } => f.name.clone(),
                NatsAuth::None => unreachable!("not among the cases"),
            };
            let text = error_of(NatsSecurity {
                auth,
                ..NatsSecurity::default()
            })
            .await
            .to_string();
            assert!(
                text.starts_with(&expected) && text.contains("does not exist"),
                "{text}"
            );
        }
        let text = error_of(NatsSecurity {
            tls: NatsTls {
                ca: Some(NamedFile::new("--nats-ca", &missing)),
                ..NatsTls::default()
            },
            ..NatsSecurity::default()
        })
        .await
        .to_string();
        assert!(text.starts_with("--nats-ca "), "{text}");
    }

    #[tokio::test]
    async fn secrets_must_be_what_they_claim_and_not_empty() {
        let scratch = Scratch::new();
        let seed = scratch.file("seed", "not a seed\n");
        let text = error_of(NatsSecurity {
            auth: NatsAuth::NkeySeedFile(NamedFile::new("nkey_seed_file", &seed)),
            ..NatsSecurity::default()
        })
        .await
        .to_string();
        assert!(text.contains("not an nkey seed"), "{text}");

        let creds = scratch.file("x.creds", "hello\n");
        let text = error_of(NatsSecurity {
            auth: NatsAuth::CredentialsFile(NamedFile::new("credentials_file", &creds)),
            ..NatsSecurity::default()
        })
        .await
        .to_string();
        assert!(text.contains("not a NATS credentials file"), "{text}");

        let empty = scratch.file("token", "\n");
        let text = error_of(NatsSecurity {
            auth: NatsAuth::TokenFile(NamedFile::new("token_file", &empty)),
            ..NatsSecurity::default()
        })
        .await
        .to_string();
        assert!(
            text.starts_with("token_file") && text.ends_with("is empty"),
            "{text}"
        );

        let pem = scratch.file("client.pem", "x");
        let text = error_of(NatsSecurity {
            tls: NatsTls {
                cert: Some(NamedFile::new("bus.tls.cert_file", &pem)),
                ..NatsTls::default()
            },
            ..NatsSecurity::default()
        })
        .await
        .to_string();
        assert!(text.contains("bus.tls.cert_file is set alone"), "{text}");
    }

    #[tokio::test]
    async fn a_valid_seed_and_a_password_file_make_options() {
        let scratch = Scratch::new();
        let pair = nkeys::KeyPair::new_user();
        let seed = scratch.file("seed", &format!("{}\n", pair.seed().expect("seed")));
        NatsSecurity {
            auth: NatsAuth::NkeySeedFile(NamedFile::new("nkey_seed_file", &seed)),
            ..NatsSecurity::default()
        }
        .connect_options()
        .await
        .expect("a valid seed is accepted");
        let password = scratch.file("password", "s3cret\r\n");
        assert_eq!(
            read_secret(&NamedFile::new("p", &password)).await,
            Ok("s3cret".to_owned()),
            "one trailing line break goes, nothing else"
        );
    }
}
