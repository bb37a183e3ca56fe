//! Writes paced as GitHub asks integrations to make them: one at a time,
//! at least a second apart, and within the secondary limits on
//! content-creating requests (80 a minute, 500 an hour per credential).
//! A write that would break the pace waits for its turn instead of being
//! sent and refused; the rest of the pass waits with it.

use std::collections::VecDeque;
use std::time::Duration;

use tokio::sync::{Mutex, MutexGuard};
use tokio::time::Instant;

/// How writes are paced. [`WritePace::GITHUB`] is what GitHub documents;
/// [`WritePace::UNPACED`] sends them as they come (a simulator that does
/// not limit, or a test).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WritePace {
    /// Least time between the starts of two writes.
    pub gap: Duration,
    /// Most writes started in any 60 seconds (`0`: no limit).
    pub per_minute: u32,
    /// Most writes started in any hour (`0`: no limit).
    pub per_hour: u32,
}

impl WritePace {
    /// GitHub's documented pace: serially, one second apart, 80 content
    /// writes a minute and 500 an hour.
    pub const GITHUB: WritePace = WritePace {
        gap: Duration::from_secs(1),
        per_minute: 80,
        per_hour: 500,
    };

    /// Against a simulator on this machine: no gap, but within GitHub's
    /// content-creation limits, which the simulator enforces as GitHub
    /// does (a write past them would wait out a minute's pause instead).
    pub const SANDBOX: WritePace = WritePace {
        gap: Duration::ZERO,
        per_minute: 80,
        per_hour: 500,
    };

    /// No pacing beyond one write at a time.
    pub const UNPACED: WritePace = WritePace {
        gap: Duration::ZERO,
        per_minute: 0,
        per_hour: 0,
    };
}

impl Default for WritePace {
    fn default() -> Self {
        Self::GITHUB
    }
}

const MINUTE: Duration = Duration::from_secs(60);
const HOUR: Duration = Duration::from_secs(3600);

/// The starts of the writes of the last hour, oldest first, behind the
/// lock that makes writes serial.
#[derive(Debug)]
pub(crate) struct Pacer {
    pace: WritePace,
    started: Mutex<VecDeque<Instant>>,
}

/// A write's turn: held while the write is sent, so the next one waits.
pub(crate) struct Turn<'p> {
    _serial: MutexGuard<'p, VecDeque<Instant>>,
}

impl Pacer {
    pub(crate) fn new(pace: WritePace) -> Self {
        Self {
            pace,
            started: Mutex::new(VecDeque::new()),
        }
    }

    /// Waits until a write may start, records its start and returns its
    /// turn.
    pub(crate) async fn turn(&self) -> Turn<'_> {
        let mut started = self.started.lock().await;
        let now = Instant::now();
        if let Some(wait) = self.wait(&started, now) {
            tracing::debug!(
                wait_ms = wait.as_millis() as u64,
                "pacing a write as GitHub asks"
            );
            tokio::time::sleep(wait).await;
        }
        let now = Instant::now();
        while started
            .front()
            .is_some_and(|t| now.saturating_duration_since(*t) >= HOUR)
        {
            started.pop_front();
        }
        started.push_back(now);
        Turn { _serial: started }
    }

    /// How long a write starting at `now` must wait, given the starts of
    /// the last hour.
    fn wait(&self, started: &VecDeque<Instant>, now: Instant) -> Option<Duration> {
        let since = |t: &Instant| now.saturating_duration_since(*t);
        let mut until = Duration::ZERO;
        if let Some(last) = started.back() {
            until = until.max(self.pace.gap.saturating_sub(since(last)));
        }
        // With `limit` writes in the window already, the next waits until
        // the oldest of the last `limit` leaves it.
        let mut window = |limit: u32, span: Duration| {
            let limit = limit as usize;
            if limit == 0 || started.len() < limit {
                return;
            }
            let oldest_counted = &started[started.len() - limit];
            if since(oldest_counted) < span {
                until = until.max(span - since(oldest_counted));
            }
        };
        window(self.pace.per_minute, MINUTE);
        window(self.pace.per_hour, HOUR);
        (!until.is_zero()).then_some(until)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The start of each of `n` writes sent back to back, in seconds after
    /// the first, as [`Pacer::turn`] schedules them.
    fn schedule(pace: WritePace, n: usize) -> Vec<u64> {
        let pacer = Pacer::new(pace);
        let begin = Instant::now();
        let mut now = begin;
        let mut started = VecDeque::new();
        (0..n)
            .map(|_| {
                if let Some(wait) = pacer.wait(&started, now) {
                    now += wait;
                }
                started.push_back(now);
                now.duration_since(begin).as_secs()
            })
            .collect()
    }

    #[test]
    fn writes_start_a_gap_apart_and_within_the_minute_and_hour_limits() {
        let pace = WritePace {
            gap: Duration::from_secs(1),
            per_minute: 5,
            per_hour: 8,
        };
        // One a second; the sixth waits for the minute after the first;
        // the ninth for the hour after the first.
        assert_eq!(schedule(pace, 10), [0, 1, 2, 3, 4, 60, 61, 62, 3600, 3601]);
    }

    #[test]
    fn githubs_pace_keeps_eighty_a_minute() {
        let starts = schedule(WritePace::GITHUB, 200);
        for (i, s) in starts.iter().enumerate() {
            let in_minute = starts[..=i].iter().filter(|t| *s - **t < 60).count();
            assert!(
                in_minute <= 80,
                "{in_minute} writes in the minute before {s}s"
            );
        }
        assert!(starts.windows(2).all(|w| w[1] > w[0]), "a second apart");
    }

    #[test]
    fn unpaced_writes_do_not_wait() {
        assert!(schedule(WritePace::UNPACED, 1000).iter().all(|s| *s == 0));
    }
}
