//! The sweep points a master entry's `search-space` expands to, as the
//! InferenceX sweep generator expands them. Klaud's baseline and the CI
//! simulator both read the repository's files through this one rule.

use serde_json::Value;

/// Most points one family may expand to; the real masters stay far below.
pub const MAX_POINTS: usize = 10_000;

/// Why a search-space entry gives no concurrencies.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct SearchSpaceError(String);

/// The concurrencies of one search-space entry: `conc-list` as written, or
/// `conc-start` doubling up to `conc-end` (as the InferenceX sweep
/// generator expands them).
pub fn concurrencies(space: &Value) -> Result<Vec<u64>, SearchSpaceError> {
    expand(space).map_err(SearchSpaceError)
}

fn expand(space: &Value) -> Result<Vec<u64>, String> {
    if let Some(list) = space.get("conc-list") {
        let list = list.as_array().ok_or("conc-list is not a list")?;
        if list.len() > MAX_POINTS {
            return Err("conc-list is too long".into());
        }
        return list
            .iter()
            .map(|c| {
                c.as_u64()
                    .filter(|c| *c > 0)
                    .ok_or_else(|| "conc-list holds a value that is not a positive integer".into())
            })
            .collect();
    }
    let start = space
        .get("conc-start")
        .and_then(Value::as_u64)
        .ok_or("conc-start is missing")?;
    let end = space
        .get("conc-end")
        .and_then(Value::as_u64)
        .ok_or("conc-end is missing")?;
    if start == 0 || start > end {
        return Err(format!(
            "conc-start {start} and conc-end {end} give no points"
        ));
    }
    let mut out = Vec::new();
    let mut conc = start;
    while conc <= end {
        out.push(conc);
        conc = match conc.checked_mul(2) {
            Some(next) => next,
            None => break,
        };
    }
    Ok(out)
}
