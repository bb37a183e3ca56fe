//! `klaud-planner` owns Klaud's knowledge of a benchmark repository and of the
//! upstream registries: the master configs and their families, identities,
//! image references, tag tracks, the OCI registry client, staleness and
//! candidate selection, the byte-exact image bump and the changelog append.
//!
//! It must never talk to GitHub or decide anything about claims or pull
//! requests: it reads a checkout and registries, and computes edits.
//!
//! Its async entry points return boxed futures, compiled once here rather
//! than again in every crate that awaits them (see
//! `klaud_lifecycle::BoxFuture`).

pub mod audit;
pub mod bump;
pub mod capacity;
pub mod changelog;
pub mod floor;
pub mod glob;
pub mod identity;
pub mod ignore;
pub mod image;
pub mod launcher_pin;
pub mod launchers;
pub mod limits;
pub mod link;
pub mod merge3;
pub mod plan;
pub mod provenance;
pub mod registry;
pub mod repo;
pub mod retired;
pub mod search_space;
pub mod tracks;
pub mod variant;
pub mod yaml;
