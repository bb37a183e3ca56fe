//! The workflow files of one repository (`.github/workflows/*.yml`).

use std::collections::BTreeMap;

use crate::context::EventContext;
use crate::workflow::{ArtifactUpload, Workflow, WorkflowError};

/// Every workflow file of a repository, by file name, with their texts so
/// reusable-workflow calls (`uses: ./.github/workflows/x.yml`) resolve to
/// sibling files.
#[derive(Debug)]
pub struct WorkflowSet {
    texts: BTreeMap<String, String>,
    workflows: BTreeMap<String, Workflow>,
}

impl WorkflowSet {
    /// Parses files given as `(file name, text)`; names are file names
    /// (`run-sweep.yml`) or repository paths (`.github/workflows/run-sweep.yml`).
    /// Only `.yml`/`.yaml` files count, as on GitHub. The first file that
    /// does not parse is the error.
    pub fn parse<I, N, T>(files: I) -> Result<Self, WorkflowError>
    where
        I: IntoIterator<Item = (N, T)>,
        N: AsRef<str>,
        T: Into<String>,
    {
        let mut texts = BTreeMap::new();
        let mut workflows = BTreeMap::new();
        for (name, text) in files {
            let name = name.as_ref();
            let name = name.strip_prefix(".github/workflows/").unwrap_or(name);
            if !(name.ends_with(".yml") || name.ends_with(".yaml")) || name.contains('/') {
                continue;
            }
            let text = text.into();
            workflows.insert(name.to_string(), Workflow::parse(name, &text)?);
            texts.insert(name.to_string(), text);
        }
        Ok(Self { texts, workflows })
    }

    /// Like [`WorkflowSet::parse`], but a file that does not parse is left
    /// out and reported instead, as GitHub runs the other workflows of a
    /// repository when one file is broken.
    pub fn parse_lenient<I, N, T>(files: I) -> (Self, Vec<WorkflowError>)
    where
        I: IntoIterator<Item = (N, T)>,
        N: AsRef<str>,
        T: Into<String>,
    {
        let mut set = Self {
            texts: BTreeMap::new(),
            workflows: BTreeMap::new(),
        };
        let mut errors = Vec::new();
        for (name, text) in files {
            match Self::parse([(name, text)]) {
                Ok(one) => {
                    set.texts.extend(one.texts);
                    set.workflows.extend(one.workflows);
                }
                Err(e) => errors.push(e),
            }
        }
        (set, errors)
    }

    /// File names, sorted.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.workflows.keys().map(String::as_str)
    }

    /// Whether the set is empty.
    pub fn is_empty(&self) -> bool {
        self.workflows.is_empty()
    }

    /// The workflow in this file (`run-sweep.yml`).
    pub fn get(&self, file_name: &str) -> Option<&Workflow> {
        let name = file_name
            .strip_prefix(".github/workflows/")
            .unwrap_or(file_name);
        self.workflows.get(name)
    }

    /// The text of a file by repository path (`.github/workflows/x.yml`), as
    /// [`Workflow::artifact_uploads`] asks for it.
    pub fn resolve(&self, path: &str) -> Option<String> {
        let name = path.strip_prefix(".github/workflows/")?;
        self.texts.get(name).cloned()
    }

    /// The workflows this event starts a run of, in file-name order.
    pub fn triggered_by<'a>(
        &'a self,
        ctx: &'a EventContext,
    ) -> impl Iterator<Item = (&'a str, &'a Workflow)> + 'a {
        self.workflows
            .iter()
            .filter(move |(_, w)| w.triggered_by(ctx))
            .map(|(n, w)| (n.as_str(), w))
    }

    /// A workflow's upload steps, following calls to sibling files.
    pub fn artifact_uploads(&self, file_name: &str) -> Result<Vec<ArtifactUpload>, WorkflowError> {
        match self.get(file_name) {
            Some(w) => w.artifact_uploads(&|p| self.resolve(p)),
            None => Ok(Vec::new()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_set_resolves_sibling_files_and_filters_by_event() {
        let set = WorkflowSet::parse([
            (".github/workflows/a.yml", "on: push\njobs:\n  x:\n    uses: ./.github/workflows/t.yml\n"),
            ("t.yml", "on: workflow_call\njobs:\n  y:\n    runs-on: x\n    steps:\n      - uses: actions/upload-artifact@v4\n        with: {name: out}\n"),
            ("README.md", "not a workflow"),
        ])
        .unwrap();
        assert_eq!(set.names().collect::<Vec<_>>(), ["a.yml", "t.yml"]);
        let push = EventContext::new("push", json!({"ref": "refs/heads/main"})).unwrap();
        assert_eq!(
            set.triggered_by(&push).map(|(n, _)| n).collect::<Vec<_>>(),
            ["a.yml"]
        );
        let uploads = set.artifact_uploads("a.yml").unwrap();
        assert_eq!(uploads.len(), 1);
        assert_eq!(uploads[0].via, ["a.yml#x"]);
        assert!(set.get(".github/workflows/t.yml").is_some());
        let err = WorkflowSet::parse([("bad.yml", "jobs: [")]).unwrap_err();
        assert_eq!(err.file, "bad.yml");
        let (set, errors) = WorkflowSet::parse_lenient([
            ("bad.yml", "jobs: ["),
            ("ok.yml", "on: push\njobs: {}\n"),
        ]);
        assert_eq!(set.names().collect::<Vec<_>>(), ["ok.yml"]);
        assert_eq!(errors.len(), 1);
    }
}
