//! Test harness (in progress).
