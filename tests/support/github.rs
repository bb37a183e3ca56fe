//! The GitHub simulator alone, for tests of the simulator, of Klaud's
//! forge and of the claim and recovery commands, which need no registry,
//! CI or baseline. The sandbox with all simulators is [`super::Harness`].
//!
//! ```ignore
//! let sim = GithubOnly::new(REPO)
//!     .user(BOT, Some("Klaud Cold"), Some(Permission::Write))
//!     .token(BOT, BOT_TOKEN, None)
//!     .files("maintainer", "seed", &[("configs/nvidia-master.yaml", b"a: 1\n")])
//!     .start()
//!     .await;
//! ```
//!
//! The state is built in one order whatever the order of the calls: every
//! user, then every token, the repository (default branch `main`), the
//! permissions, then the seed commit. A knob is one more field here, set by
//! a method and applied in [`GithubOnly::state`].
//!
//! This module is the only place the tests call `GithubSim::start`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use klaud_sandbox::github::{GithubSim, GithubState, Permission};

enum Seed {
    None,
    Files {
        author: String,
        message: String,
        files: BTreeMap<String, Option<Vec<u8>>>,
    },
    Dir {
        dir: PathBuf,
        author: String,
    },
}

/// What the GitHub simulator is started with.
pub struct GithubOnly {
    repo: String,
    users: Vec<(String, Option<String>, Option<Permission>)>,
    tokens: Vec<(String, String, Option<u64>)>,
    seed: Seed,
}

impl GithubOnly {
    /// An empty simulator with `repo` (`owner/name`) on `main`.
    pub fn new(repo: &str) -> Self {
        Self {
            repo: repo.to_owned(),
            users: Vec::new(),
            tokens: Vec::new(),
            seed: Seed::None,
        }
    }

    /// A user named `name`, with `permission` on the repository when given.
    pub fn user(mut self, login: &str, name: Option<&str>, permission: Option<Permission>) -> Self {
        self.users
            .push((login.to_owned(), name.map(str::to_owned), permission));
        self
    }

    /// A token of `login` with a request `budget` (`None`: the default).
    pub fn token(mut self, login: &str, token: &str, budget: Option<u64>) -> Self {
        self.tokens
            .push((login.to_owned(), token.to_owned(), budget));
        self
    }

    /// Seeds `main` with one commit by `author` holding `files`.
    pub fn files(mut self, author: &str, message: &str, files: &[(&str, &[u8])]) -> Self {
        self.seed = Seed::Files {
            author: author.to_owned(),
            message: message.to_owned(),
            files: files
                .iter()
                .map(|(path, bytes)| ((*path).to_owned(), Some(bytes.to_vec())))
                .collect(),
        };
        self
    }

    /// Seeds `main` from the tree at `dir`, committed by `author`.
    pub fn seed_dir(mut self, dir: &Path, author: &str) -> Self {
        self.seed = Seed::Dir {
            dir: dir.to_owned(),
            author: author.to_owned(),
        };
        self
    }

    /// The state, not served yet, and the seed commit's sha (when seeded).
    pub async fn state(self) -> (GithubState, Option<String>) {
        let st = GithubState::new();
        for (login, name, _) in &self.users {
            st.add_user(login, name.as_deref(), false).await;
        }
        for (login, token, budget) in &self.tokens {
            st.add_token(login, token, *budget).await.expect("token");
        }
        st.create_repo(&self.repo, "main").await.expect("repo");
        for (login, _, permission) in &self.users {
            if let Some(permission) = permission {
                st.set_permission(&self.repo, login, *permission)
                    .await
                    .expect("permission");
            }
        }
        let main = match self.seed {
            Seed::None => None,
            Seed::Files {
                author,
                message,
                files,
            } => Some(
                st.push_commit(&self.repo, "main", &author, files, &message)
                    .await
                    .expect("seed commit"),
            ),
            Seed::Dir { dir, author } => Some(
                st.seed_from_dir(&self.repo, &dir, Some(&author))
                    .await
                    .expect("seed"),
            ),
        };
        (st, main)
    }

    /// The simulator, served on loopback.
    pub async fn start(self) -> GithubSim {
        let (st, _) = self.state().await;
        serve(st).await
    }

    /// The simulator served by a runtime of its own on a thread that lives
    /// as long as the test process, for tests that run `klaud` as a child
    /// process from synchronous code. Its URL and state.
    pub fn start_detached(self) -> (String, GithubState) {
        super::detached(
            move || self.start(),
            |sim: &GithubSim| (sim.url(), sim.state().clone()),
        )
    }
}

/// Serves `state` (built by [`GithubOnly::state`] and changed further) on
/// loopback.
pub async fn serve(state: GithubState) -> GithubSim {
    GithubSim::start(state).await.expect("sim")
}
