//! The display names the results API knows models by, and its OpenAPI
//! description that lists them.
//!
//! InferenceX-app keeps one display name per DB model key (the master
//! config's `model-prefix`; `packages/constants/src/models.ts`) and looks a
//! request's `model` up exactly (`DISPLAY_MODEL_TO_DB[model]`): no case
//! folding, no other spelling. Public clients read the names from
//! `/api/openapi.json`, where the `model` parameter of `/api/v1/benchmarks`
//! carries them as an `enum`. That description is written apart from the
//! table, so the two can disagree; [`ModelNames`] can stage both ways.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Value, json};

/// Longest prefix or name the control route accepts.
pub const MAX_NAME_LEN: usize = 200;

/// The default table: the app's seven (`models.ts`), the names the live app
/// answers to for two newer prefixes of the real masters (public clients
/// ask for `DeepSeek-V4-Pro` and `Kimi-K3`), and the demo repository's
/// prefix under a name that none of its `model:` paths spells, so a client
/// that guesses from the path finds nothing. The other prefixes of the real
/// masters (`glm5.1`, `glm5.2`, `kimik2.6`, `minimaxm3`) have no name here:
/// nothing shows which one the app gives them.
pub const DEFAULT_NAMES: &[(&str, &str)] = &[
    ("dsr1", "DeepSeek-R1-0528"),
    ("gptoss120b", "gpt-oss-120b"),
    ("llama70b", "Llama-3.3-70B-Instruct-FP8"),
    ("qwen3.5", "Qwen-3.5-397B-A17B"),
    ("kimik2.5", "Kimi-K2.5"),
    ("minimaxm2.5", "MiniMax-M2.5"),
    ("glm5", "GLM-5"),
    ("dsv4", "DeepSeek-V4-Pro"),
    ("kimik3", "Kimi-K3"),
    ("demo", "Klaud-Demo-Bench"),
];

/// The route's table (prefix → name) and what the OpenAPI `enum` says.
#[derive(Debug, Clone)]
pub struct ModelNames {
    names: BTreeMap<String, String>,
    /// Names the route knows that the description leaves out.
    unlisted: BTreeSet<String>,
    /// Names the description still lists that the route forgot.
    stale: BTreeSet<String>,
}

impl Default for ModelNames {
    fn default() -> Self {
        Self {
            names: DEFAULT_NAMES
                .iter()
                .map(|(p, n)| ((*p).to_owned(), (*n).to_owned()))
                .collect(),
            unlisted: BTreeSet::new(),
            stale: BTreeSet::new(),
        }
    }
}

impl ModelNames {
    /// The DB model key `name` stands for, looked up exactly.
    pub fn prefix_of(&self, name: &str) -> Option<&str> {
        self.names
            .iter()
            .find(|(_, n)| n.as_str() == name)
            .map(|(p, _)| p.as_str())
    }

    /// The name of `prefix`, if the route knows one.
    pub fn name_of(&self, prefix: &str) -> Option<&str> {
        self.names.get(prefix).map(String::as_str)
    }

    /// Every prefix → name the route knows.
    pub fn table(&self) -> &BTreeMap<String, String> {
        &self.names
    }

    /// Names `prefix` `name` (`None`: the route forgets its name).
    /// `listed` says whether the OpenAPI description lists the name: with a
    /// name, `false` leaves it out of the `enum`; without one, `true` keeps
    /// the forgotten name in the `enum` (a stale description). A name
    /// another prefix had moves to `prefix`, as the app's table, built by
    /// `Object.fromEntries`, keeps the last entry of a name.
    pub fn set(&mut self, prefix: &str, name: Option<&str>, listed: bool) {
        let old = self.names.remove(prefix);
        if let Some(old) = &old {
            self.unlisted.remove(old);
            self.stale.remove(old);
        }
        match name {
            Some(name) => {
                self.names.retain(|_, n| n != name);
                self.stale.remove(name);
                if listed {
                    self.unlisted.remove(name);
                } else {
                    self.unlisted.insert(name.to_owned());
                }
                self.names.insert(prefix.to_owned(), name.to_owned());
            }
            None => {
                if let Some(old) = old.filter(|_| listed) {
                    self.stale.insert(old);
                }
            }
        }
    }

    /// The `enum` of the description, sorted.
    pub fn listed(&self) -> Vec<String> {
        let mut out: BTreeSet<String> = self
            .names
            .values()
            .filter(|n| !self.unlisted.contains(*n))
            .cloned()
            .collect();
        out.extend(self.stale.iter().cloned());
        out.into_iter().collect()
    }

    /// `/api/openapi.json`: an OpenAPI 3.1 description of the public routes
    /// whose `model` parameter lists [`ModelNames::listed`].
    pub fn openapi(&self) -> Value {
        let error = json!({
            "description": "An error",
            "content": {"application/json": {"schema": {
                "type": "object", "properties": {"error": {"type": "string"}}}}},
        });
        let rows = |what: &str| {
            json!({
                "description": what,
                "content": {"application/json": {"schema": {"type": "array", "items": {"type": "object"}}}},
            })
        };
        json!({
            "openapi": "3.1.0",
            "info": {
                "title": "InferenceX API",
                "version": "1.0.0",
                "description": "Public benchmark results of InferenceX. Answers are gzip-compressed JSON.",
            },
            "paths": {
                "/api/v1/benchmarks": {"get": {
                    "summary": "Latest benchmark result per config, concurrency and sequence lengths",
                    "parameters": [
                        {"name": "model", "in": "query", "required": true,
                         "description": "Model display name",
                         "schema": {"type": "string", "enum": self.listed()}},
                        {"name": "date", "in": "query", "required": false,
                         "description": "Newest results on or before this day (YYYY-MM-DD)",
                         "schema": {"type": "string", "format": "date"}},
                        {"name": "exact", "in": "query", "required": false,
                         "description": "With `true`, only results of `date` itself",
                         "schema": {"type": "string", "enum": ["true", "false"]}},
                    ],
                    "responses": {"200": rows("Benchmark rows"), "400": error.clone(), "500": error.clone()},
                }},
                "/api/v1/evaluations": {"get": {
                    "summary": "Every evaluation result of the latest run attempts",
                    "responses": {"200": rows("Evaluation rows"), "500": error.clone()},
                }},
                "/api/v1/workflow-info": {"get": {
                    "summary": "Runs, changelog entries and configs of one day",
                    "parameters": [
                        {"name": "date", "in": "query", "required": true,
                         "schema": {"type": "string", "format": "date"}},
                    ],
                    "responses": {"200": {"description": "Runs, changelogs and configs",
                        "content": {"application/json": {"schema": {"type": "object"}}}},
                        "400": error.clone(), "500": error},
                }},
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lookup_is_exact_and_one_name_per_prefix() {
        let mut n = ModelNames::default();
        assert_eq!(n.prefix_of("Qwen-3.5-397B-A17B"), Some("qwen3.5"));
        assert_eq!(n.prefix_of("qwen-3.5-397b-a17b"), None);
        assert_eq!(n.prefix_of("qwen3.5"), None);
        assert_eq!(n.prefix_of("Klaud-Demo-Bench"), Some("demo"));
        n.set("demo", Some("Demo-2"), true);
        assert_eq!(n.prefix_of("Klaud-Demo-Bench"), None);
        assert_eq!(n.name_of("demo"), Some("Demo-2"));
        // A name moves: one prefix per name.
        n.set("glm5.2", Some("Demo-2"), true);
        assert_eq!(n.name_of("demo"), None);
        assert_eq!(n.prefix_of("Demo-2"), Some("glm5.2"));
    }

    #[test]
    fn the_enum_can_leave_out_a_known_name_or_keep_a_forgotten_one() {
        let mut n = ModelNames::default();
        let listed = n.listed();
        let mut sorted = listed.clone();
        sorted.sort();
        assert_eq!(listed, sorted);
        assert!(listed.contains(&"Kimi-K3".to_owned()));
        n.set("kimik3", Some("Kimi-K3"), false);
        assert!(!n.listed().contains(&"Kimi-K3".to_owned()));
        assert_eq!(n.prefix_of("Kimi-K3"), Some("kimik3"));
        n.set("dsv4", None, true);
        assert!(n.listed().contains(&"DeepSeek-V4-Pro".to_owned()));
        assert_eq!(n.prefix_of("DeepSeek-V4-Pro"), None);
        n.set("dsv4", Some("DeepSeek-V4-Pro"), true);
        assert_eq!(n.prefix_of("DeepSeek-V4-Pro"), Some("dsv4"));
        let doc = n.openapi();
        let params = doc["paths"]["/api/v1/benchmarks"]["get"]["parameters"]
            .as_array()
            .unwrap();
        let model = params.iter().find(|p| p["name"] == "model").unwrap();
        assert_eq!(model["schema"]["enum"], json!(n.listed()));
    }
}
