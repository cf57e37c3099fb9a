//! The bus's credentials and TLS (`[bus.auth]`, `[bus.tls]`) and the worker endpoint
//! allow-list (`[registry]`): their sections, validation and conversion to what
//! router-actors takes (`NatsSecurity`, `EndpointAllowList`).
//!
//! Secrets are never in the file itself: each key names a file holding one (a relative path
//! is relative to the config file's directory). The files are read when the node connects,
//! before it listens; a missing one is an error naming its key.

use super::ConfigError;
use router_actors::bus::nats_security::{NamedFile, NatsAuth, NatsSecurity, NatsTls};
use router_actors::registry::EndpointAllowList;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// `[bus.auth]`: how the node authenticates to NATS; at most one method.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct BusAuthSection {
    /// A NATS credentials file (user JWT + nkey seed, as `nsc` writes it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub credentials_file: Option<PathBuf>,
    /// A file holding one user nkey seed (`SU...`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nkey_seed_file: Option<PathBuf>,
    /// A user name (with `password_file`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// A file holding `user`'s password.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub password_file: Option<PathBuf>,
    /// A file holding the server's token.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub token_file: Option<PathBuf>,
}

/// `[bus.tls]`: TLS of the NATS connection.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct BusTlsSection {
    /// Refuse a server that does not offer TLS (a `tls://` URL requires it too).
    pub required: bool,
    /// The CA (PEM) the server's certificate must chain to; absent: the system's roots.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ca_file: Option<PathBuf>,
    /// Client certificate (PEM) for servers that verify clients; needs `key_file`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cert_file: Option<PathBuf>,
    /// The client certificate's private key (PEM); needs `cert_file`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key_file: Option<PathBuf>,
}

/// `[registry]`: which worker announcements the node accepts.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RegistrySection {
    /// Hosts a worker may announce as its endpoint (where prompts are sent): IP addresses,
    /// CIDR blocks, host names and `*.suffix` names. Empty: any (a warning at start-up when
    /// the bus is NATS). From the environment: comma-separated.
    #[serde(deserialize_with = "super::names")]
    pub allowed_endpoints: Vec<String>,
}

impl BusAuthSection {
    fn files_mut(&mut self) -> [&mut Option<PathBuf>; 4] {
        [
            &mut self.credentials_file,
            &mut self.nkey_seed_file,
            &mut self.password_file,
            &mut self.token_file,
        ]
    }

    pub fn is_set(&self) -> bool {
        *self != Self::default()
    }

    fn validate(&self) -> Result<(), ConfigError> {
        let methods: Vec<&str> = [
            ("bus.auth.credentials_file", self.credentials_file.is_some()),
            ("bus.auth.nkey_seed_file", self.nkey_seed_file.is_some()),
            (
                "bus.auth.password_file",
                self.password_file.is_some() || self.user.is_some(),
            ),
            ("bus.auth.token_file", self.token_file.is_some()),
        ]
        .into_iter()
        .filter_map(|(key, set)| set.then_some(key))
        .collect();
        if let [first, second, ..] = methods[..] {
            return Err(ConfigError::invalid(
                second,
                format!("only one NATS authentication method may be set, and {first} is too"),
            ));
        }
        match (&self.user, &self.password_file) {
            (Some(user), None) => Err(ConfigError::invalid(
                "bus.auth.password_file",
                format!("is required with bus.auth.user ({user:?})"),
            )),
            (None, Some(_)) => Err(ConfigError::invalid(
                "bus.auth.user",
                "is required with bus.auth.password_file",
            )),
            (Some(user), Some(_)) if user.trim().is_empty() => {
                Err(ConfigError::invalid("bus.auth.user", "must not be empty"))
            }
            _ => Ok(()),
        }
    }

    fn to_auth(&self) -> NatsAuth {
        let named = |key: &str, path: &PathBuf| NamedFile::new(key, path.clone());
        if let Some(path) = &self.credentials_file {
            NatsAuth::CredentialsFile(named("bus.auth.credentials_file", path))
        } else if let Some(path) = &self.nkey_seed_file {
            NatsAuth::NkeySeedFile(named("bus.auth.nkey_seed_file", path))
        } else if let (Some(user), Some(path)) = (&self.user, &self.password_file) {
            NatsAuth::UserPassword {
                user: user.clone(),
                password: named("bus.auth.password_file", path),
            }
        } else if let Some(path) = &self.token_file {
            NatsAuth::TokenFile(named("bus.auth.token_file", path))
        } else {
            NatsAuth::None
        }
    }
}

impl BusTlsSection {
    fn files_mut(&mut self) -> [&mut Option<PathBuf>; 3] {
        [&mut self.ca_file, &mut self.cert_file, &mut self.key_file]
    }

    pub fn is_set(&self) -> bool {
        *self != Self::default()
    }

    fn validate(&self) -> Result<(), ConfigError> {
        match (&self.cert_file, &self.key_file) {
            (Some(_), None) => Err(ConfigError::invalid(
                "bus.tls.key_file",
                "is required with bus.tls.cert_file",
            )),
            (None, Some(_)) => Err(ConfigError::invalid(
                "bus.tls.cert_file",
                "is required with bus.tls.key_file",
            )),
            _ => Ok(()),
        }
    }

    fn to_tls(&self) -> NatsTls {
        let named = |key: &str, path: &Option<PathBuf>| {
            path.as_ref().map(|p| NamedFile::new(key, p.clone()))
        };
        NatsTls {
            required: self.required,
            ca: named("bus.tls.ca_file", &self.ca_file),
            cert: named("bus.tls.cert_file", &self.cert_file),
            key: named("bus.tls.key_file", &self.key_file),
        }
    }
}

impl super::BusSection {
    /// The NATS connection's credentials and TLS settings.
    pub fn security(&self) -> NatsSecurity {
        NatsSecurity {
            auth: self.auth.to_auth(),
            tls: self.tls.to_tls(),
            connect_timeout: None,
        }
    }

    /// `[bus.auth]` and `[bus.tls]` hold together, and are only set for a NATS bus.
    pub(super) fn validate_security(&self) -> Result<(), ConfigError> {
        if self.kind == super::BusKind::InProcess {
            for (key, set) in [
                ("bus.auth", self.auth.is_set()),
                ("bus.tls", self.tls.is_set()),
            ] {
                if set {
                    return Err(ConfigError::invalid(
                        key,
                        "is set but bus.kind = \"in-process\" (it applies to NATS only)",
                    ));
                }
            }
        }
        self.auth.validate()?;
        self.tls.validate()
    }

    /// Relative secret and certificate paths are relative to `dir` (the config file's).
    pub(super) fn resolve_relative_paths(&mut self, dir: &Path) {
        let Self { auth, tls, .. } = self;
        for path in auth
            .files_mut()
            .into_iter()
            .chain(tls.files_mut())
            .flatten()
        {
            if path.is_relative() {
                *path = dir.join(&*path);
            }
        }
    }
}

impl RegistrySection {
    /// The parsed allow-list; a bad entry is named by its index.
    pub fn allow_list(&self) -> Result<EndpointAllowList, ConfigError> {
        EndpointAllowList::parse(&self.allowed_endpoints).map_err(|e| {
            ConfigError::invalid(
                &format!("registry.allowed_endpoints[{}]", e.index),
                format!("{:?}: {}", e.entry, e.reason),
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use crate::config::Config;
    use router_actors::bus::nats_security::NatsAuth;
    use std::path::Path;

    fn parse(text: &str) -> Result<Config, crate::config::ConfigError> {
        let config = Config::from_toml_str(text, Path::new("/etc/sy/node.toml"))?;
        config.validate()?;
        Ok(config)
    }

    #[test]
    fn one_auth_method_and_a_whole_client_certificate() {
        let cases = [
            (
                "[bus.auth]\ncredentials_file = \"a.creds\"\ntoken_file = \"t\"\n",
                "bus.auth.token_file",
            ),
            (
                "[bus.auth]\nnkey_seed_file = \"s\"\nuser = \"u\"\npassword_file = \"p\"\n",
                "bus.auth.password_file",
            ),
            ("[bus.auth]\nuser = \"router\"\n", "bus.auth.password_file"),
            ("[bus.auth]\npassword_file = \"p\"\n", "bus.auth.user"),
            ("[bus.tls]\ncert_file = \"c.pem\"\n", "bus.tls.key_file"),
            ("[bus.tls]\nkey_file = \"k.pem\"\n", "bus.tls.cert_file"),
            (
                "[bus]\nkind = \"in-process\"\n[bus.tls]\nrequired = true\n",
                "bus.tls",
            ),
            (
                "[registry]\nallowed_endpoints = [\"10.0.0.0/8\", \"10.0.0.0/40\"]\n",
                "registry.allowed_endpoints[1]",
            ),
        ];
        for (text, key) in cases {
            let error = parse(text).expect_err(text);
            assert_eq!(error.key(), Some(key), "{text}: {error}");
        }
        let unknown = parse("[bus.auth]\npassword = \"inline\"\n").expect_err("unknown key");
        assert!(unknown.to_string().contains("password"), "{unknown}");
    }

    #[test]
    fn relative_files_are_relative_to_the_config_file_and_become_named_files() {
        let dir = std::env::temp_dir().join(format!("sy-sec-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).expect("dir");
        let path = dir.join("node.toml");
        std::fs::write(
            &path,
            "[bus.auth]\nuser = \"router\"\npassword_file = \"secrets/nats.pw\"\n\
             [bus.tls]\nrequired = true\nca_file = \"/etc/ca.pem\"\n\
             cert_file = \"c.pem\"\nkey_file = \"k.pem\"\n\
             [registry]\nallowed_endpoints = [\"10.0.0.0/8\", \"*.engines.internal\"]\n",
        )
        .expect("write");
        let config = Config::load_with_env(Some(&path), std::iter::empty::<(String, String)>())
            .expect("valid");
        let security = config.bus.security();
        match &security.auth {
            NatsAuth::UserPassword { user, password } => {
                assert_eq!(user, "router");
                assert_eq!(password.name, "bus.auth.password_file");
                assert_eq!(password.path, dir.join("secrets/nats.pw"));
            }
            other => panic!("expected user and password, got {other:?}"),
        }
        assert!(security.tls.required);
        let ca = security.tls.ca.as_ref().expect("ca");
        assert_eq!(ca.path, Path::new("/etc/ca.pem"), "absolute stays");
        let cert = security.tls.cert.as_ref().expect("cert");
        assert_eq!(cert.path, dir.join("c.pem"));
        let allow = config.registry.allow_list().expect("valid");
        assert!(allow.check("http://10.2.3.4:8000").is_ok());
        assert!(allow.check("http://gpu1.engines.internal:8000").is_ok());
        assert!(allow.check("http://192.168.0.1:8000").is_err());
        // print-config shows the paths (never a secret) and reads back the same.
        let printed = config.to_toml().expect("prints");
        let again = Config::from_toml_str(&printed, &path).expect("reads back");
        assert_eq!(again, config);
        let _ = std::fs::remove_dir_all(dir);
    }
}
