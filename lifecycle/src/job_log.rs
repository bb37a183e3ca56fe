//! A job's log as triage reads it: bounded. A failing benchmark job can
//! print megabytes (every request of a sweep); what names the failure is
//! near the start (the engine's launch, its version) and at the end (the
//! traceback, the runner's last words), so a long log keeps both ends.

/// How many bytes of one job's log are read.
pub const MAX_JOB_LOG_BYTES: usize = 256 * 1024;

/// `log` cut to at most `limit` bytes: unchanged when it fits; otherwise
/// its first quarter and its last three quarters of `limit`, each cut at a
/// line boundary where there is one, around a line saying how many bytes
/// were left out.
pub fn bounded(log: &[u8], limit: usize) -> Vec<u8> {
    if log.len() <= limit {
        return log.to_vec();
    }
    let marker_room = 64.min(limit);
    let room = limit - marker_room;
    let head_len = room / 4;
    let tail_len = room - head_len;
    let mut head = &log[..head_len];
    if let Some(nl) = head.iter().rposition(|&b| b == b'\n') {
        head = &head[..=nl];
    }
    let mut tail = &log[log.len() - tail_len..];
    if let Some(nl) = tail.iter().position(|&b| b == b'\n') {
        tail = &tail[nl + 1..];
    }
    let cut = log.len() - head.len() - tail.len();
    let marker = format!("[... {cut} bytes left out ...]\n");
    let mut out = Vec::with_capacity(limit);
    out.extend_from_slice(head);
    if head.last().is_some_and(|&b| b != b'\n') {
        out.push(b'\n');
    }
    out.extend_from_slice(&marker.as_bytes()[..marker.len().min(limit.saturating_sub(out.len()))]);
    out.extend_from_slice(tail);
    out.truncate(limit);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_short_log_is_kept_whole() {
        assert_eq!(bounded(b"a\nb\n", 100), b"a\nb\n");
    }

    #[test]
    fn a_long_log_keeps_its_head_and_tail_within_the_limit() {
        let mut log = String::from("vllm serve --gpu-memory-utilization 0.95\n");
        for i in 0..10_000 {
            log.push_str(&format!("request {i} ok\n"));
        }
        log.push_str("torch.OutOfMemoryError: CUDA out of memory\n");
        let out = bounded(log.as_bytes(), 4096);
        assert!(out.len() <= 4096, "{}", out.len());
        let text = String::from_utf8(out).unwrap();
        assert!(text.starts_with("vllm serve --gpu-memory-utilization 0.95\n"));
        assert!(text.ends_with("torch.OutOfMemoryError: CUDA out of memory\n"));
        assert!(text.contains("bytes left out ...]\n"), "{text}");
    }

    #[test]
    fn a_tiny_limit_is_still_kept() {
        assert!(bounded(&[b'x'; 1000], 10).len() <= 10);
        assert!(bounded(&[b'x'; 1000], 0).is_empty());
    }
}
