//! Every integration test of the workspace, in one binary (one link step).
//! Each module is one area; [`support`] is the shared harness.

mod support;

mod audit_e2e;
mod capacity;
mod claims_github;
mod cli_app;
mod cli_candidate;
mod cli_claims;
mod cli_demo;
mod cli_doctor;
mod cli_messages;
mod cli_plan;
mod cli_recover_status;
mod cli_repository;
mod cli_sandbox;
mod cli_workflow;
mod dashboard;
mod experiments;
mod first_contact;
mod github_forge;
mod github_schema;
mod github_sim;
mod inferencex_compat;
mod layout;
mod lifecycle_e2e;
mod lifecycle_full;
mod lifecycle_workflows;
mod live_reports;
mod maintainer_commands;
mod merge_reuse;
mod mergeable;
mod people;
mod people_merge;
mod plan_sandbox;
mod plan_upstream;
mod provenance_e2e;
mod readiness;
mod recipe_roots;
mod repair_loop;
mod sandbox_ci;
mod sandbox_registry;
mod serve_daemon;
mod serve_processes;
mod signoff;
mod takeover_safety;
