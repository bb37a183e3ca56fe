//! What `klaud.toml` must hold beyond its types: every key's range and
//! how keys agree with each other, each error naming the key.

use super::*;

impl Config {
    // Kept whole: one list of independent checks, each naming its key, in
    // the order of the file's sections.
    pub(super) fn check(&self, origin: &str) -> Result<(), ConfigError> {
        let invalid = |key: &str, message: String| ConfigError::Invalid {
            path: origin.to_owned(),
            key: key.to_owned(),
            message,
        };
        if let Some(repository) = &self.github.repository {
            let parts: Vec<&str> = repository.split('/').collect();
            if parts.len() != 2 || parts.iter().any(|p| p.is_empty()) {
                return Err(invalid(
                    "github.repository",
                    format!("{repository:?} must be owner/name"),
                ));
            }
        }
        if self.github.app_id.is_none() {
            for (key, set) in [
                (
                    "github.app_installation_id",
                    self.github.app_installation_id.is_some(),
                ),
                (
                    "github.app_private_key_file",
                    self.github.app_private_key_file.is_some(),
                ),
            ] {
                if set {
                    return Err(invalid(
                        key,
                        "is set but github.app_id is not; set the App's id too, or remove the key"
                            .to_owned(),
                    ));
                }
            }
        }
        for (prefix, name) in &self.lifecycle.model_names {
            let key = format!("lifecycle.model_names.{prefix:?}");
            // Keys used to be the master's `model` path; such a key now
            // matches no family, silently, so it is refused.
            if prefix.contains('/') {
                return Err(invalid(
                    &key,
                    format!(
                        "keys are model prefixes (a master entry's `model-prefix`, e.g. \"dsr1\"), \
                         not model paths; write [lifecycle.model_names] \"<model-prefix>\" = {name:?}"
                    ),
                ));
            }
            if prefix.trim().is_empty() || name.trim().is_empty() {
                return Err(invalid(
                    &key,
                    "neither the model prefix nor its display name may be empty".to_owned(),
                ));
            }
        }
        klaud_planner::audit::validate(&self.audit.engines)
            .map_err(|e| invalid("audit.engines", e.to_string()))?;
        self.hunt
            .check()
            .map_err(|(key, message)| invalid(key, message))?;
        if self.audit.max_files > klaud_github::COMPARE_FILE_LIMIT {
            return Err(invalid(
                "audit.max_files",
                format!(
                    "{} is more than the {} changed files GitHub's compare lists",
                    self.audit.max_files,
                    klaud_github::COMPARE_FILE_LIMIT
                ),
            ));
        }
        url::Url::parse(&self.github.api_url).map_err(|e| {
            invalid(
                "github.api_url",
                format!("{:?} is not a URL: {e}", self.github.api_url),
            )
        })?;
        if let Some(web) = &self.github.web_url {
            url::Url::parse(web)
                .map_err(|e| invalid("github.web_url", format!("{web:?} is not a URL: {e}")))?;
        }
        if let Some(c) = &self.capacity {
            klaud_planner::capacity::HttpCapacity::new(
                &c.origin,
                &c.path,
                "checked-later".into(),
                c.timeout,
            )
            .map_err(|e| {
                let key = if e.to_string().contains("path ") {
                    "capacity.path"
                } else {
                    "capacity.origin"
                };
                invalid(key, e.to_string())
            })?;
            at_least(c.timeout, MIN_INTERVAL)
                .map_err(|e| invalid("capacity.timeout", e.to_string()))?;
            if c.key_env.trim().is_empty() {
                return Err(invalid("capacity.key_env", "must name a variable".into()));
            }
            for (name, ids) in &c.clusters {
                if ids.is_empty() || ids.iter().any(|i| i.trim().is_empty()) {
                    return Err(invalid(
                        &format!("capacity.clusters.{name}"),
                        "must list at least one non-empty cluster id".into(),
                    ));
                }
            }
        }
        if self.planner.max_candidates == 0 {
            return Err(invalid(
                "planner.max_candidates",
                "must be at least 1".to_owned(),
            ));
        }
        klaud_service::daemon::schedule::WaveSchedule::parse(
            &self.daemon.schedule,
            &self.daemon.timezone,
        )
        .map_err(|e| invalid("daemon.schedule", e.to_string()))?;
        let listen: std::net::SocketAddr = self.daemon.dashboard_listen.parse().map_err(|_| {
            invalid(
                "daemon.dashboard_listen",
                format!(
                    "{:?} is not an address like 127.0.0.1:8723",
                    self.daemon.dashboard_listen
                ),
            )
        })?;
        klaud_service::dashboard::check_listen(listen, self.daemon.dashboard_allow_remote)
            .map_err(|e| invalid("daemon.dashboard_listen", e.to_string()))?;
        if self.daemon.concurrency == 0 {
            return Err(invalid(
                "daemon.concurrency",
                "must be at least 1".to_owned(),
            ));
        }
        // Waits (`planner.min_age`, `planner.cooldown`) may be zero: that
        // turns the wait off. Intervals and timeouts may not.
        for (key, value) in [
            ("daemon.reconcile_interval", self.daemon.reconcile_interval),
            ("registry.timeout", self.registry.timeout),
            ("github.write_timeout", self.github.write_timeout),
        ] {
            at_least(value, MIN_INTERVAL).map_err(|e| invalid(key, e.to_string()))?;
        }
        // Heartbeats run inside reconcile passes and renew once less than
        // half of the lease is left: a pass must fit in that half with room
        // to spare for the pass itself, or a live owner loses its claims.
        let floor = self
            .daemon
            .reconcile_interval
            .saturating_mul(LEASE_PER_RECONCILE)
            .max(MIN_LEASE);
        if self.daemon.lease < floor {
            return Err(invalid(
                "daemon.lease",
                format!(
                    "{}s is too short: heartbeats can keep a lease only when it is at least \
                     {LEASE_PER_RECONCILE} × daemon.reconcile_interval and at least {}s \
                     (here {}s)",
                    self.daemon.lease.as_secs(),
                    MIN_LEASE.as_secs(),
                    floor.as_secs()
                ),
            ));
        }
        // A write is sent only with lease_margin + write_timeout of lease
        // left, so it lands (or is given up) before the lease ends and
        // another instance may take over. The engine caps that window at a
        // quarter of the lease (less the second leases are rounded to):
        // a shorter lease would let a stalled write land after a takeover.
        let window = self
            .daemon
            .lease_margin
            .saturating_add(self.github.write_timeout);
        let needed = window
            .saturating_mul(4)
            .saturating_add(Duration::from_secs(1));
        if self.daemon.lease < needed {
            return Err(invalid(
                "daemon.lease",
                format!(
                    "{}s is too short for the write window: a GitHub write is sent only with \
                     daemon.lease_margin + github.write_timeout ({}s + {}s) of lease left, and \
                     that must fit four times in the lease (at least {}s); lengthen the lease or \
                     shorten daemon.lease_margin or github.write_timeout",
                    self.daemon.lease.as_secs_f64(),
                    self.daemon.lease_margin.as_secs_f64(),
                    self.github.write_timeout.as_secs_f64(),
                    needed.as_secs_f64()
                ),
            ));
        }
        // Only with a hook: without one the timeout is never used.
        if !self.lifecycle.repair_command.is_empty()
            && (self.lifecycle.repair_timeout.is_zero()
                || self.lifecycle.repair_timeout >= self.daemon.lease)
        {
            return Err(invalid(
                "lifecycle.repair_timeout",
                format!(
                    "{}s must be more than zero and shorter than daemon.lease ({}s): the \
                     claim's heartbeat does not run while the hook does",
                    self.lifecycle.repair_timeout.as_secs(),
                    self.daemon.lease.as_secs()
                ),
            ));
        }
        if let Some(why) = super::playbook_path_problem(&self.lifecycle.playbook) {
            return Err(invalid("lifecycle.playbook", why));
        }
        if self.registry.concurrency == 0 {
            return Err(invalid(
                "registry.concurrency",
                "must be at least 1".to_owned(),
            ));
        }
        for (host, base) in &self.registry.mirrors {
            url::Url::parse(base).map_err(|e| {
                invalid(
                    &format!("registry.mirrors.{host}"),
                    format!("{base:?} is not a URL: {e}"),
                )
            })?;
        }
        for (host, base) in &self.registry.hub_api {
            let key = format!("registry.hub_api.{host}");
            let url = url::Url::parse(base)
                .map_err(|e| invalid(&key, format!("{base:?} is not a URL: {e}")))?;
            if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none() {
                return Err(invalid(
                    &key,
                    format!("{base:?} must be an http or https URL with a host"),
                ));
            }
        }
        if self.registry.breaker_cooldown.is_zero() {
            return Err(invalid(
                "registry.breaker_cooldown",
                "must be longer than 0s (a host that cannot be reached would be asked by every request)"
                    .to_owned(),
            ));
        }
        if self.registry.max_timed_tags == 0 {
            return Err(invalid(
                "registry.max_timed_tags",
                "must be at least 1".to_owned(),
            ));
        }
        for (index, root) in self.recipe_roots.iter().enumerate() {
            let safe = |path: &str| {
                !path.trim().is_empty()
                    && !path.starts_with('/')
                    && path.split('/').all(|part| part != "..")
            };
            if !safe(&root.prefix) || !safe(&root.folder) {
                return Err(invalid(
                    &format!("recipe_roots[{index}]"),
                    format!(
                        "prefix {:?} and folder {:?} must be non-empty relative paths without `..`",
                        root.prefix, root.folder
                    ),
                ));
            }
        }
        self.experiment_specs()
            .map_err(|e| invalid(&e.key, e.message))?;
        self.ignore_rules()
            .map_err(|e| invalid(&e.key, e.message))?;
        self.track_rules().map_err(|e| invalid(&e.key, e.message))?;
        self.release_rules()
            .map_err(|e| invalid(&e.key, e.message))?;
        Ok(())
    }
}
