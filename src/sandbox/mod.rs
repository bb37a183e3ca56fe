//! The sandbox: simulators of the outside world (GitHub, its CI, and the OCI
//! registry) that Klaud is tested and demonstrated against over loopback.

pub mod ci;
pub mod github;
pub mod registry;
