//! The NATS credentials and TLS flags shared by the commands that connect a worker to the
//! bus (`router-tools worker --sim`, `router-node link`): the command-line face of
//! [`NatsSecurity`], with the same meanings as a router's `[bus.auth]` and
//! `[bus.tls]`. Secrets are given as files, never as flag values (a command line is visible
//! to every user of the machine).

use super::nats_security::{NamedFile, NatsAuth, NatsSecurity, NatsTls};
use clap::Args;
use std::path::PathBuf;

/// `--nats-*` flags: at most one authentication method, and TLS.
#[derive(Debug, Clone, Default, Args)]
pub struct NatsSecurityArgs {
    /// NATS credentials file (user JWT + nkey seed).
    #[arg(long, value_name = "FILE", group = "nats_auth")]
    pub nats_creds: Option<PathBuf>,
    /// File holding a user nkey seed (SU...).
    #[arg(long, value_name = "FILE", group = "nats_auth")]
    pub nats_nkey_seed: Option<PathBuf>,
    /// NATS user name (with --nats-password-file).
    #[arg(long, value_name = "NAME", requires = "nats_password_file")]
    pub nats_user: Option<String>,
    /// File holding the NATS user's password (with --nats-user).
    #[arg(long, value_name = "FILE", requires = "nats_user", group = "nats_auth")]
    pub nats_password_file: Option<PathBuf>,
    /// File holding the NATS server's token.
    #[arg(long, value_name = "FILE", group = "nats_auth")]
    pub nats_token_file: Option<PathBuf>,
    /// CA (PEM) the NATS server's certificate must chain to.
    #[arg(long, value_name = "FILE")]
    pub nats_tls_ca: Option<PathBuf>,
    /// Client certificate (PEM) for a NATS server that verifies clients.
    #[arg(long, value_name = "FILE", requires = "nats_tls_key")]
    pub nats_tls_cert: Option<PathBuf>,
    /// The client certificate's key (PEM).
    #[arg(long, value_name = "FILE", requires = "nats_tls_cert")]
    pub nats_tls_key: Option<PathBuf>,
    /// Refuse a NATS server that does not offer TLS.
    #[arg(long)]
    pub nats_tls_required: bool,
}

impl NatsSecurityArgs {
    /// The settings these flags give; each file is named by its flag in errors.
    pub fn security(&self) -> NatsSecurity {
        let named = |flag: &str, path: &PathBuf| NamedFile::new(flag, path.clone());
        let auth = if let Some(path) = &self.nats_creds {
            NatsAuth::CredentialsFile(named("--nats-creds", path))
        } else if let Some(path) = &self.nats_nkey_seed {
            NatsAuth::NkeySeedFile(named("--nats-nkey-seed", path))
        } else if let Some(path) = &self.nats_password_file {
            NatsAuth::UserPassword {
                user: self.nats_user.clone().unwrap_or_default(),
                password: named("--nats-password-file", path),
            }
        } else if let Some(path) = &self.nats_token_file {
            NatsAuth::TokenFile(named("--nats-token-file", path))
        } else {
            NatsAuth::None
        };
        NatsSecurity {
            auth,
            tls: NatsTls {
                required: self.nats_tls_required,
                ca: self.nats_tls_ca.as_ref().map(|p| named("--nats-tls-ca", p)),
                cert: self
                    .nats_tls_cert
                    .as_ref()
                    .map(|p| named("--nats-tls-cert", p)),
                key: self
                    .nats_tls_key
                    .as_ref()
                    .map(|p| named("--nats-tls-key", p)),
            },
            connect_timeout: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct Cli {
        #[command(flatten)]
        nats: NatsSecurityArgs,
    }

    #[test]
    fn one_method_and_whole_pairs_or_a_usage_error() {
        for bad in [
            vec!["x", "--nats-creds", "a", "--nats-token-file", "b"],
            vec!["x", "--nats-user", "u"],
            vec!["x", "--nats-password-file", "p"],
            vec!["x", "--nats-tls-cert", "c"],
            vec![
                "x",
                "--nats-nkey-seed",
                "s",
                "--nats-user",
                "u",
                "--nats-password-file",
                "p",
            ],
        ] {
            assert!(Cli::try_parse_from(&bad).is_err(), "{bad:?}");
        }
        let cli = Cli::try_parse_from([
            "x",
            "--nats-user",
            "worker",
            "--nats-password-file",
            "/run/pw",
            "--nats-tls-ca",
            "/ca.pem",
            "--nats-tls-required",
        ])
        .expect("valid flags");
        let security = cli.nats.security();
        assert_eq!(
            security.auth,
            NatsAuth::UserPassword {
                user: "worker".into(),
                password: NamedFile::new("--nats-password-file", "/run/pw"),
            }
        );
        assert!(security.tls.required);
        assert_eq!(
            security.tls.ca,
            Some(NamedFile::new("--nats-tls-ca", "/ca.pem"))
        );
        assert_eq!(
            Cli::try_parse_from(["x"])
                .expect("no flags")
                .nats
                .security(),
            NatsSecurity::default()
        );
    }
}
