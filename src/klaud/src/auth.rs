//! How Klaud authenticates to GitHub: a token from the environment, or a
//! GitHub App installation. An App signs a JWT (at most ten minutes long)
//! with its private key and trades it for an installation token; octocrab
//! keeps that token and mints a new one 30 s before it expires, so a daemon
//! or a long `--wait` never runs on an expired token. Secrets never reach a
//! message: errors name the variable or file, never what is in it.

use std::path::PathBuf;

use klaud_github::{Credential, GithubError, RetryPolicy, Secret};

use crate::config::{CredentialError, GithubConfig};

/// The App flags every command that talks to GitHub takes; each overrides
/// its `[github]` key.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct AuthArgs {
    /// Act as this GitHub App's installation instead of a token (overrides `github.app_id`).
    #[arg(long, value_name = "ID", global = true)]
    pub app_id: Option<u64>,
    /// File with the App's private key, PEM (overrides `github.app_private_key_file`;
    /// without either the key is read from `github.app_private_key_env`,
    /// default `KLAUD_GITHUB_APP_PRIVATE_KEY`).
    #[arg(long, value_name = "FILE", global = true)]
    pub app_private_key_file: Option<PathBuf>,
    /// The App's installation id (overrides `github.app_installation_id`;
    /// default: looked up for the repository).
    #[arg(long, value_name = "ID", global = true)]
    pub app_installation_id: Option<u64>,
}

impl AuthArgs {
    /// Applies the flags over the configuration.
    pub fn apply(&self, github: &mut GithubConfig) {
        if let Some(id) = self.app_id {
            github.app_id = Some(id);
        }
        if let Some(file) = &self.app_private_key_file {
            github.app_private_key_file = Some(file.display().to_string());
        }
        if let Some(id) = self.app_installation_id {
            github.app_installation_id = Some(id);
        }
    }
}

/// Where the credential comes from, read but not yet used.
#[derive(Debug, Clone)]
pub enum Auth {
    /// A token from one of `github.token_env`.
    Token {
        /// The variable it came from.
        variable: String,
        /// The token.
        token: Secret,
    },
    /// A GitHub App.
    App {
        /// The App id.
        app_id: u64,
        /// Its private key (PEM).
        key: Secret,
        /// Where the key came from (a file path or `$VARIABLE`), for messages.
        key_from: String,
        /// The installation, when configured; otherwise looked up.
        installation_id: Option<u64>,
    },
}

impl Auth {
    /// The credential the configuration names: an App when `github.app_id`
    /// is set, else the first set variable of `github.token_env`. `None`
    /// when neither is there (the caller says what to set).
    pub fn from_config(
        github: &GithubConfig,
        env: impl Fn(&str) -> Result<String, std::env::VarError>,
    ) -> Result<Option<Self>, CredentialError> {
        let Some(app_id) = github.app_id else {
            return Ok(github.token_from(env)?.map(|found| Auth::Token {
                variable: found.variable,
                token: found.token,
            }));
        };
        let (pem, key_from) = match &github.app_private_key_file {
            Some(file) => {
                let pem = std::fs::read_to_string(file).map_err(|e| {
                    CredentialError(format!(
                        "github.app_private_key_file / --app-private-key-file {file}: cannot read: {e}"
                    ))
                })?;
                (pem, file.clone())
            }
            None => {
                let name = &github.app_private_key_env;
                match env(name) {
                    Ok(pem) if !pem.trim().is_empty() => (pem, format!("${name}")),
                    Ok(_) | Err(std::env::VarError::NotPresent) => {
                        return Err(CredentialError(format!(
                            "GitHub App {app_id}: no private key: set ${name} \
                             (github.app_private_key_env) to the App's PEM key, or pass \
                             --app-private-key-file FILE (github.app_private_key_file)"
                        )));
                    }
                    Err(std::env::VarError::NotUnicode(_)) => {
                        return Err(CredentialError(format!(
                            "environment variable {name} is not valid UTF-8"
                        )));
                    }
                }
            }
        };
        if !pem.contains("-----BEGIN") {
            return Err(CredentialError(format!(
                "GitHub App {app_id}: the private key in {key_from} is not a PEM key (it must \
                 start with -----BEGIN RSA PRIVATE KEY----- or -----BEGIN PRIVATE KEY-----)"
            )));
        }
        Ok(Some(Auth::App {
            app_id,
            key: Secret::new(pem.trim().to_owned() + "\n"),
            key_from,
            installation_id: github.app_installation_id,
        }))
    }

    /// [`Auth::from_config`] from the process environment, required.
    pub fn required(github: &GithubConfig) -> Result<Self, CredentialError> {
        Self::from_config(github, |name| std::env::var(name))?
            .ok_or_else(|| CredentialError(github.missing_token_in(|name| std::env::var(name))))
    }

    /// Where the credential comes from, without any secret.
    pub fn describe(&self) -> String {
        match self {
            Auth::Token { variable, .. } => format!("a token from ${variable} (value not shown)"),
            Auth::App {
                app_id,
                key_from,
                installation_id,
                ..
            } => format!(
                "GitHub App {app_id} (key from {key_from}, not shown), installation {}",
                installation_id.map_or_else(|| "looked up".to_owned(), |i| i.to_string())
            ),
        }
    }

    /// The forge credential for `repo` (`OWNER/NAME`): for an App without
    /// an installation id, the installation is looked up first.
    pub async fn credential(&self, api_url: &str, repo: &str) -> Result<Credential, GithubError> {
        match self {
            Auth::Token { token, .. } => Ok(Credential::Token(token.clone())),
            Auth::App {
                app_id,
                key,
                installation_id,
                ..
            } => {
                let installation_id = match installation_id {
                    Some(id) => *id,
                    None => {
                        klaud_github::find_installation(
                            api_url,
                            *app_id,
                            key,
                            repo,
                            RetryPolicy::default(),
                        )
                        .await?
                    }
                };
                Ok(Credential::App {
                    app_id: *app_id,
                    private_key_pem: key.clone(),
                    installation_id,
                })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::env::VarError;

    const PEM: &str = "-----BEGIN RSA PRIVATE KEY-----\nMIIsecret\n-----END RSA PRIVATE KEY-----\n";

    #[test]
    fn an_app_id_wins_over_a_token_and_the_key_comes_from_the_variable() {
        let github = GithubConfig {
            app_id: Some(42),
            ..GithubConfig::default()
        };
        let env = |name: &str| match name {
            "KLAUD_GITHUB_TOKEN" => Ok("ghp_x".to_owned()),
            "KLAUD_GITHUB_APP_PRIVATE_KEY" => Ok(PEM.to_owned()),
            _ => Err(VarError::NotPresent),
        };
        let auth = Auth::from_config(&github, env).unwrap().expect("auth");
        assert!(matches!(
            &auth,
            Auth::App {
                app_id: 42,
                installation_id: None,
                ..
            }
        ));
        let text = format!("{} {auth:?}", auth.describe());
        assert!(!text.contains("MIIsecret"), "{text}");
        assert!(text.contains("$KLAUD_GITHUB_APP_PRIVATE_KEY"), "{text}");
    }

    #[test]
    fn a_missing_or_unreadable_key_names_where_to_put_it_without_the_value() {
        let github = GithubConfig {
            app_id: Some(42),
            ..GithubConfig::default()
        };
        let err = Auth::from_config(&github, |_| Err(VarError::NotPresent))
            .unwrap_err()
            .to_string();
        assert!(err.contains("KLAUD_GITHUB_APP_PRIVATE_KEY"), "{err}");
        assert!(err.contains("--app-private-key-file"), "{err}");
        let err = Auth::from_config(&github, |_| Ok("ghp_not_a_pem".to_owned()))
            .unwrap_err()
            .to_string();
        assert!(err.contains("not a PEM key"), "{err}");
        assert!(!err.contains("ghp_not_a_pem"), "{err}");
        let file = GithubConfig {
            app_private_key_file: Some("/nonexistent/key.pem".to_owned()),
            ..github
        };
        let err = Auth::from_config(&file, |_| Err(VarError::NotPresent))
            .unwrap_err()
            .to_string();
        assert!(err.contains("/nonexistent/key.pem"), "{err}");
    }

    #[test]
    fn flags_override_the_configuration() {
        let mut github = GithubConfig::default();
        AuthArgs {
            app_id: Some(7),
            app_private_key_file: Some(PathBuf::from("k.pem")),
            app_installation_id: Some(9),
        }
        .apply(&mut github);
        assert_eq!(github.app_id, Some(7));
        assert_eq!(github.app_installation_id, Some(9));
        assert_eq!(github.app_private_key_file.as_deref(), Some("k.pem"));
        let none = Auth::from_config(&GithubConfig::default(), |_| Err(VarError::NotPresent));
        assert!(matches!(none, Ok(None)));
    }
}
