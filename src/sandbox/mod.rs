//! The sandbox: simulators of the outside world (GitHub, and the OCI
//! registry) that Klaud is tested and demonstrated against over loopback.

pub mod github;
pub mod registry;
