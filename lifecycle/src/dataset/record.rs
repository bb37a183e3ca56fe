//! What is kept of a producer run's AgentX datasets: in the frozen
//! baseline ([`FrozenDataset`]) and, per run, in the journal
//! ([`ProducerDatasets`]). Plain records, so that the baseline and the
//! journal that hold them need nothing of the reading and comparing in
//! [`crate::dataset`].

use serde::{Deserialize, Serialize};

/// The traces an AgentX benchmark replayed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Dataset {
    /// `dataset.loader` (`semianalysis_cc_traces_weka_062126`), or the
    /// Hugging Face name when a row states no loader: what two replays are
    /// compared by.
    pub name: String,
    /// `dataset.hf_dataset_name`, when stated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hf_dataset_name: Option<String>,
}

/// One AgentX row of a producer run, as kept: the config it measured and
/// the dataset it names.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProducerRow {
    /// `infmax_model_prefix`.
    pub model_prefix: Option<String>,
    /// `hw`, the runner label.
    pub hw: Option<String>,
    /// Engine.
    pub framework: Option<String>,
    /// Precision.
    pub precision: Option<String>,
    /// Concurrency.
    pub conc: u64,
    /// Tensor parallelism.
    pub tp: Option<u64>,
    /// The dataset, `None` when the row names none (or an unreadable one).
    pub dataset: Option<Dataset>,
}

/// What one producer run's `bmk_agentic_*` artifacts say, kept per run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "kebab-case")]
pub enum ProducerDatasets {
    /// The AgentX rows read.
    Read {
        /// One per result file, in artifact order.
        rows: Vec<ProducerRow>,
    },
    /// They cannot be read, and never will be (the run is gone, its
    /// artifacts expired, it uploaded none).
    Unknown {
        /// Why (a reason of this module).
        reason: String,
    },
}

/// What the frozen baseline knows of one producer run's dataset, for the
/// family it was frozen for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FrozenDataset {
    /// The producer run id.
    pub run_id: u64,
    /// Its dataset, or why it is unknown.
    pub finding: DatasetFinding,
}

/// A dataset, or why it is unknown.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "kebab-case")]
pub enum DatasetFinding {
    /// The run's rows of the family name this dataset.
    Named {
        /// The dataset.
        dataset: Dataset,
    },
    /// Unknown.
    Unknown {
        /// Why (a reason of this module).
        reason: String,
    },
}
