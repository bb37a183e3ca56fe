//! `klaud-sandbox`: simulators of the outside world (GitHub, its CI, and the
//! OCI registry) that Klaud is tested and demonstrated against over loopback.
//!
//! It copies what GitHub, GitHub Actions and a registry do (their docs, the
//! OCI spec, the seeded repository's own files), never what Klaud happens to
//! send. It must never depend on Klaud's lifecycle, claims or GitHub crates:
//! only on `klaud-planner` to read the seeded repository's files and
//! `klaud-workflows` to read its Actions workflow files. No
//! production crate depends on it; the binary reaches it only through the
//! `sandbox` cargo feature (`klaud demo`, `klaud sandbox`).

pub mod capacity;
pub mod ci;
pub mod github;
pub mod registry;
pub mod stack;
