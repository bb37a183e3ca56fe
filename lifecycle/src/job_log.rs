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
    let mut kept = HeadTail::new(limit);
    kept.push(log);
    kept.finish()
}

/// [`bounded`] as the bytes stream in: holds at most `limit` bytes however
/// long the log is, so a log of gigabytes is read without keeping it.
/// Fed the same bytes in any split, it gives what [`bounded`] gives.
#[derive(Debug)]
pub struct HeadTail {
    limit: usize,
    head_len: usize,
    tail_len: usize,
    head: Vec<u8>,
    tail: std::collections::VecDeque<u8>,
    total: usize,
    /// The log outgrew the limit: the head is fixed, only the tail moves.
    split: bool,
}

impl HeadTail {
    pub fn new(limit: usize) -> Self {
        let room = limit - 64.min(limit);
        let head_len = room / 4;
        HeadTail {
            limit,
            head_len,
            tail_len: room - head_len,
            head: Vec::new(),
            tail: std::collections::VecDeque::new(),
            total: 0,
            split: false,
        }
    }

    pub fn push(&mut self, mut bytes: &[u8]) {
        self.total = self.total.saturating_add(bytes.len());
        // Whole while it fits: the head takes everything up to the limit,
        // and is split into head and tail only once the log outgrows it.
        if !self.split {
            let take = bytes.len().min(self.limit - self.head.len());
            self.head.extend_from_slice(&bytes[..take]);
            bytes = &bytes[take..];
            if bytes.is_empty() {
                return;
            }
            self.split = true;
            let spill = self.head.split_off(self.head_len.min(self.head.len()));
            self.keep_tail(&spill);
        }
        self.keep_tail(bytes);
    }

    fn keep_tail(&mut self, bytes: &[u8]) {
        let bytes = &bytes[bytes.len().saturating_sub(self.tail_len)..];
        let over = (self.tail.len() + bytes.len()).saturating_sub(self.tail_len);
        self.tail.drain(..over);
        self.tail.extend(bytes);
    }

    /// How many bytes were pushed in all.
    pub fn total(&self) -> usize {
        self.total
    }

    pub fn finish(self) -> Vec<u8> {
        if self.total <= self.limit {
            return self.head;
        }
        let mut head = &self.head[..];
        if let Some(nl) = head.iter().rposition(|&b| b == b'\n') {
            head = &head[..=nl];
        }
        let (front, back) = self.tail.as_slices();
        let whole_tail = [front, back].concat();
        let mut tail = &whole_tail[..];
        if let Some(nl) = tail.iter().position(|&b| b == b'\n') {
            tail = &tail[nl + 1..];
        }
        let cut = self.total - head.len() - tail.len();
        let marker = format!("[... {cut} bytes left out ...]\n");
        let mut out = Vec::with_capacity(self.limit);
        out.extend_from_slice(head);
        if head.last().is_some_and(|&b| b != b'\n') {
            out.push(b'\n');
        }
        out.extend_from_slice(
            &marker.as_bytes()[..marker.len().min(self.limit.saturating_sub(out.len()))],
        );
        out.extend_from_slice(tail);
        out.truncate(self.limit);
        out
    }
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
    fn a_log_streamed_in_pieces_is_cut_as_a_whole_one_is() {
        let mut log = String::new();
        for i in 0..5_000 {
            log.push_str(&format!("line {i}: {}\n", "x".repeat(i % 37)));
        }
        for limit in [0, 10, 100, 4096, log.len(), log.len() + 1] {
            let whole = old_bounded(log.as_bytes(), limit);
            assert_eq!(bounded(log.as_bytes(), limit), whole, "limit {limit}");
            for piece in [1, 7, 1000, 65_536] {
                let mut kept = HeadTail::new(limit);
                for chunk in log.as_bytes().chunks(piece) {
                    kept.push(chunk);
                }
                assert_eq!(kept.total(), log.len());
                assert_eq!(kept.finish(), whole, "limit {limit}, pieces of {piece}");
            }
        }
    }

    /// The cut as it was written for a log held whole: the streaming
    /// keeper must give the same bytes.
    fn old_bounded(log: &[u8], limit: usize) -> Vec<u8> {
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
        out.extend_from_slice(
            &marker.as_bytes()[..marker.len().min(limit.saturating_sub(out.len()))],
        );
        out.extend_from_slice(tail);
        out.truncate(limit);
        out
    }

    #[test]
    fn a_tiny_limit_is_still_kept() {
        assert!(bounded(&[b'x'; 1000], 10).len() <= 10);
        assert!(bounded(&[b'x'; 1000], 0).is_empty());
    }
}
