//! Log output: human-readable on a terminal, JSON lines for services, and
//! GitHub Actions workflow commands (`::warning::`, `::error::`) when Klaud
//! runs inside Actions, so problems show up as annotations on the run.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use tracing::callsite::Identifier;

use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::Layer;
use tracing_subscriber::layer::{Context, SubscriberExt as _};
use tracing_subscriber::util::SubscriberInitExt as _;

/// How logs are written to stderr.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Human,
    /// One JSON object per line.
    Json,
    /// Human-readable lines plus Actions annotations for warnings and errors.
    Github,
}

impl LogFormat {
    /// `github` inside GitHub Actions, else `human`.
    pub fn detect() -> Self {
        if std::env::var("GITHUB_ACTIONS").is_ok_and(|v| v == "true") {
            Self::Github
        } else {
            Self::Human
        }
    }
}

/// Whether human lines get ANSI colours: on a terminal, or in Actions (its
/// log viewer renders them); never with `NO_COLOR` set — log files and
/// journald get plain text.
fn colour(format: LogFormat, stderr_is_terminal: bool, no_color: Option<&str>) -> bool {
    if no_color.is_some_and(|v| !v.is_empty()) {
        return false;
    }
    format == LogFormat::Github || stderr_is_terminal
}

/// Installs the global subscriber; `RUST_LOG` filters (default: warnings).
pub fn init(format: LogFormat) {
    use std::io::IsTerminal as _;
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let ansi = colour(
        format,
        std::io::stderr().is_terminal(),
        std::env::var("NO_COLOR").ok().as_deref(),
    );
    let registry = tracing_subscriber::registry()
        .with(filter)
        .with(OncePerHost::default());
    let _ = match format {
        LogFormat::Human => registry
            .with(
                tracing_subscriber::fmt::layer()
                    .with_ansi(ansi)
                    .with_writer(std::io::stderr),
            )
            .try_init(),
        LogFormat::Json => registry
            .with(
                tracing_subscriber::fmt::layer()
                    .json()
                    .with_writer(std::io::stderr),
            )
            .try_init(),
        LogFormat::Github => registry
            .with(
                tracing_subscriber::fmt::layer()
                    .with_ansi(ansi)
                    .with_writer(std::io::stderr),
            )
            .with(ActionsAnnotations)
            .try_init(),
    };
}

/// How long a warning about one host stays unsaid after it was said.
const HOST_REPEAT: Duration = Duration::from_secs(300);

/// Says a warning or error that names a `host` once per host and place
/// in the code within [`HOST_REPEAT`]: requests in flight to a host that
/// stopped answering all fail together, and each would say the same thing
/// (ten lines for one unreachable registry in a `klaud plan`). A daemon
/// still hears of the host again after a while.
#[derive(Default)]
struct OncePerHost {
    said: Mutex<HashMap<(Identifier, String), Instant>>,
}

/// Hosts remembered at most; past it the memory starts over (hosts come
/// from the configuration and the repository's images, so this is only a
/// bound).
const HOSTS_REMEMBERED: usize = 1024;

impl<S: Subscriber> Layer<S> for OncePerHost {
    fn event_enabled(&self, event: &Event<'_>, _ctx: Context<'_, S>) -> bool {
        if *event.metadata().level() > Level::WARN {
            return true;
        }
        let mut host = HostField::default();
        event.record(&mut host);
        let Some(host) = host.0 else {
            return true;
        };
        let now = Instant::now();
        let mut said = self.said.lock().unwrap_or_else(|p| p.into_inner());
        let key = (event.metadata().callsite(), host);
        if said
            .get(&key)
            .is_some_and(|at| now.duration_since(*at) < HOST_REPEAT)
        {
            return false;
        }
        if said.len() >= HOSTS_REMEMBERED {
            said.clear();
        }
        said.insert(key, now);
        true
    }
}

/// The `host` field of an event.
#[derive(Default)]
struct HostField(Option<String>);

impl Visit for HostField {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "host" {
            self.0 = Some(format!("{value:?}"));
        }
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "host" {
            self.0 = Some(value.to_owned());
        }
    }
}

/// Prints warnings and errors again as Actions workflow commands.
struct ActionsAnnotations;

impl<S: Subscriber> Layer<S> for ActionsAnnotations {
    fn on_event(&self, event: &Event<'_>, _ctx: Context<'_, S>) {
        let command = match *event.metadata().level() {
            Level::ERROR => "error",
            Level::WARN => "warning",
            _ => return,
        };
        let mut text = MessageText::default();
        event.record(&mut text);
        eprintln!("::{command}::{}", annotation_escape(&text.0));
    }
}

#[derive(Default)]
struct MessageText(String);

impl Visit for MessageText {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if !self.0.is_empty() {
            self.0.push(' ');
        }
        if field.name() == "message" {
            let _ = write!(self.0, "{value:?}");
        } else {
            let _ = write!(self.0, "{}={value:?}", field.name());
        }
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        if !self.0.is_empty() {
            self.0.push(' ');
        }
        if field.name() == "message" {
            self.0.push_str(value);
        } else {
            let _ = write!(self.0, "{}={value}", field.name());
        }
    }
}

/// Workflow commands end at a newline; `%`, CR and LF are escaped.
pub fn annotation_escape(text: &str) -> String {
    text.replace('%', "%25")
        .replace('\r', "%0D")
        .replace('\n', "%0A")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn colours_only_on_a_terminal_or_in_actions_and_never_with_no_color() {
        assert!(colour(LogFormat::Human, true, None));
        assert!(!colour(LogFormat::Human, false, None), "a pipe or a file");
        assert!(colour(LogFormat::Github, false, None));
        assert!(!colour(LogFormat::Human, true, Some("1")));
        assert!(!colour(LogFormat::Github, false, Some("1")));
        assert!(
            colour(LogFormat::Human, true, Some("")),
            "empty NO_COLOR is unset"
        );
    }

    /// Counts the events that reach the layers after [`OncePerHost`].
    struct Count(std::sync::Arc<std::sync::atomic::AtomicUsize>);

    impl<S: Subscriber> Layer<S> for Count {
        fn on_event(&self, _event: &Event<'_>, _ctx: Context<'_, S>) {
            self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
    }

    #[test]
    fn a_warning_about_a_host_is_said_once_per_host() {
        let seen = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let subscriber = tracing_subscriber::registry()
            .with(OncePerHost::default())
            .with(Count(seen.clone()));
        tracing::subscriber::with_default(subscriber, || {
            for _ in 0..10 {
                for host in ["docker.io", "nvcr.io"] {
                    tracing::warn!(%host, "registry host unreachable");
                }
            }
            for _ in 0..3 {
                tracing::warn!("no host named");
                tracing::info!(host = "docker.io", "not a warning");
            }
        });
        assert_eq!(
            seen.load(std::sync::atomic::Ordering::SeqCst),
            2 + 3 + 3,
            "one per host, and everything else as it came"
        );
    }

    #[test]
    fn annotations_stay_on_one_line() {
        assert_eq!(annotation_escape("a\nb%c\r"), "a%0Ab%25c%0D");
    }
}
