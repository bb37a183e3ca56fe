//! When planner waves fire: a cron expression in a time zone.
//!
//! Configuration accepts the usual 5-field crontab (`min hour dom month
//! dow`, Sunday = 0 or 7) and the 6/7-field form with seconds first (and an
//! optional year) that the `cron` crate reads, where day-of-week numbers
//! run from 1 = Sunday. The 5-field form is translated — day-of-week numbers
//! become names, so `1-5` stays Monday to Friday — rather than handed over
//! as is, which would silently shift every weekday by one.

use std::str::FromStr;

use chrono::{DateTime, Utc};
use chrono_tz::Tz;

/// The shortest time between two scheduled waves.
pub const MIN_WAVE_GAP: chrono::TimeDelta = chrono::TimeDelta::seconds(60);

const DAY_NAMES: [&str; 7] = ["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"];

/// Why a wave schedule was refused: the expression or time zone, and what
/// to write instead.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScheduleError {
    /// Not an IANA time zone.
    #[error("unknown time zone {0:?}; use an IANA name such as UTC or Europe/Berlin")]
    TimeZone(String),
    /// Neither the crontab nor the seconds-first form.
    #[error(
        "cron expression {expression:?} has {fields} fields; write 5 (min hour day month weekday) or 6–7 (seconds first)"
    )]
    FieldCount {
        /// The expression as configured.
        expression: String,
        /// How many fields it has.
        fields: usize,
    },
    /// The `cron` crate refused it.
    #[error("cron expression {expression:?} is invalid: {reason}")]
    Invalid {
        /// The expression as configured.
        expression: String,
        /// The crate's message.
        reason: String,
    },
    /// It never fires after now.
    #[error(
        "cron expression {expression:?} never fires; write one that fires at least \
         once, e.g. \"0 */6 * * *\" (every 6 hours)"
    )]
    NeverFires {
        /// The expression as configured.
        expression: String,
    },
    /// It fires waves closer together than [`MIN_WAVE_GAP`].
    #[error(
        "cron expression {expression:?} fires {gap}s apart; waves must be at least \
         {min}s apart"
    )]
    TooOften {
        /// The expression as configured.
        expression: String,
        /// Seconds between two fires.
        gap: i64,
        /// The least gap allowed, in seconds.
        min: i64,
    },
    /// A crontab weekday step that is not a positive number.
    #[error("weekday step {0:?} must be a positive number")]
    WeekdayStep(String),
    /// A crontab weekday range whose end comes before its start.
    #[error("weekday range {0:?} runs backwards")]
    WeekdayRange(String),
    /// A crontab weekday number past 7.
    #[error("weekday {0} is out of range 0–7")]
    WeekdayNumber(usize),
    /// A crontab weekday that is neither a number nor a day name.
    #[error("weekday {0:?} is not 0–7 or a day name")]
    Weekday(String),
}

/// A parsed wave schedule.
#[derive(Debug, Clone)]
pub struct WaveSchedule {
    schedule: cron::Schedule,
    timezone: Tz,
    expression: String,
}

impl WaveSchedule {
    /// Parses `expression` (5, 6 or 7 fields) in the IANA time zone `timezone`.
    pub fn parse(expression: &str, timezone: &str) -> Result<Self, ScheduleError> {
        Self::parse_checked(expression, timezone, Utc::now())
    }

    fn parse_checked(
        expression: &str,
        timezone: &str,
        now: DateTime<Utc>,
    ) -> Result<Self, ScheduleError> {
        let timezone: Tz = timezone
            .parse()
            .map_err(|_| ScheduleError::TimeZone(timezone.to_owned()))?;
        let fields: Vec<&str> = expression.split_whitespace().collect();
        let translated = match fields.len() {
            5 => format!(
                "0 {} {} {} {} {}",
                fields[0],
                fields[1],
                fields[2],
                fields[3],
                crontab_days(fields[4])?
            ),
            6 | 7 => fields.join(" "),
            n => {
                return Err(ScheduleError::FieldCount {
                    expression: expression.to_owned(),
                    fields: n,
                });
            }
        };
        let schedule =
            cron::Schedule::from_str(&translated).map_err(|e| ScheduleError::Invalid {
                expression: expression.to_owned(),
                reason: e.to_string(),
            })?;
        let parsed = Self {
            schedule,
            timezone,
            expression: expression.to_owned(),
        };
        parsed.check_fires(now)?;
        Ok(parsed)
    }

    /// Refuses a schedule that never fires after `now` (`0 0 30 2 *`, a
    /// past year) or fires waves less than [`MIN_WAVE_GAP`] apart: either
    /// would be a daemon that silently never plans, or plans in a loop.
    fn check_fires(&self, now: DateTime<Utc>) -> Result<(), ScheduleError> {
        let expression = &self.expression;
        let fires: Vec<DateTime<Utc>> = self
            .schedule
            .after(&now.with_timezone(&self.timezone))
            .take(3)
            .map(|t| t.with_timezone(&Utc))
            .collect();
        if fires.is_empty() {
            return Err(ScheduleError::NeverFires {
                expression: expression.clone(),
            });
        }
        let min = MIN_WAVE_GAP.num_seconds();
        if let Some(gap) = fires
            .windows(2)
            .map(|w| (w[1] - w[0]).num_seconds())
            .find(|gap| *gap < min)
        {
            return Err(ScheduleError::TooOften {
                expression: expression.clone(),
                gap,
                min,
            });
        }
        Ok(())
    }

    /// The first fire time strictly after `after`.
    pub fn next_after(&self, after: DateTime<Utc>) -> Option<DateTime<Utc>> {
        self.schedule
            .after(&after.with_timezone(&self.timezone))
            .next()
            .map(|t| t.with_timezone(&Utc))
    }

    /// The expression as configured.
    pub fn expression(&self) -> &str {
        &self.expression
    }
}

/// Translates a crontab day-of-week field (0/7 = Sunday) into day names.
fn crontab_days(field: &str) -> Result<String, ScheduleError> {
    if field == "*" || field == "?" {
        return Ok(field.to_owned());
    }
    let mut days: Vec<usize> = Vec::new();
    for part in field.split(',') {
        let (range, step) = match part.split_once('/') {
            Some((range, step)) => (
                range,
                step.parse::<usize>()
                    .ok()
                    .filter(|s| *s > 0)
                    .ok_or_else(|| ScheduleError::WeekdayStep(step.to_owned()))?,
            ),
            None => (part, 1),
        };
        let (start, end) = match range {
            "*" => (0, 6),
            _ => match range.split_once('-') {
                Some((a, b)) => (day_number(a)?, day_number(b)?),
                None => {
                    let day = day_number(range)?;
                    (day, if step > 1 { 6 } else { day })
                }
            },
        };
        // 7 is Sunday too; a range ending at 7 ends at Sunday.
        let end = if end < start && end == 0 { 7 } else { end };
        if end < start {
            return Err(ScheduleError::WeekdayRange(range.to_owned()));
        }
        days.extend((start..=end).step_by(step).map(|d| d % 7));
    }
    days.sort_unstable();
    days.dedup();
    Ok(days
        .iter()
        .map(|d| DAY_NAMES[*d])
        .collect::<Vec<_>>()
        .join(","))
}

fn day_number(text: &str) -> Result<usize, ScheduleError> {
    if let Ok(n) = text.parse::<usize>() {
        return if n <= 7 {
            Ok(n)
        } else {
            Err(ScheduleError::WeekdayNumber(n))
        };
    }
    DAY_NAMES
        .iter()
        .position(|name| name.eq_ignore_ascii_case(text))
        .ok_or_else(|| ScheduleError::Weekday(text.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::{Datelike, TimeZone, Timelike, Weekday};

    fn at(y: i32, m: u32, d: u32, h: u32, min: u32) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(y, m, d, h, min, 0).unwrap()
    }

    #[test]
    fn five_field_weekdays_keep_their_crontab_meaning() {
        // 2026-11-29 is a Sunday.
        let weekdays = WaveSchedule::parse("30 6 * * 1-5", "UTC").unwrap();
        let next = weekdays.next_after(at(2026, 11, 29, 12, 0)).unwrap();
        assert_eq!(next.weekday(), Weekday::Mon);
        assert_eq!((next.hour(), next.minute()), (6, 30));
        let sunday = WaveSchedule::parse("0 0 * * 0", "UTC").unwrap();
        assert_eq!(
            sunday
                .next_after(at(2026, 11, 29, 12, 0))
                .unwrap()
                .weekday(),
            Weekday::Sun
        );
        let seven = WaveSchedule::parse("0 0 * * 7", "UTC").unwrap();
        assert_eq!(
            seven.next_after(at(2026, 11, 29, 12, 0)).unwrap().weekday(),
            Weekday::Sun
        );
        let weekend = WaveSchedule::parse("0 0 * * 5-7", "UTC").unwrap();
        assert_eq!(
            weekend
                .next_after(at(2026, 11, 30, 12, 0))
                .unwrap()
                .weekday(),
            Weekday::Fri
        );
    }

    #[test]
    fn six_and_seven_field_forms_pass_through() {
        let hourly = WaveSchedule::parse("0 0 * * * *", "UTC").unwrap();
        assert_eq!(
            hourly.next_after(at(2026, 11, 29, 12, 10)).unwrap(),
            at(2026, 11, 29, 13, 0)
        );
        assert!(WaveSchedule::parse("0 0 * * * * 2027", "UTC").is_ok());
    }

    #[test]
    fn time_zones_shift_the_fire_time() {
        let berlin = WaveSchedule::parse("0 9 * * *", "Europe/Berlin").unwrap();
        // 09:00 in Berlin in winter is 08:00 UTC.
        assert_eq!(
            berlin.next_after(at(2026, 11, 29, 0, 0)).unwrap(),
            at(2026, 11, 29, 8, 0)
        );
    }

    #[test]
    fn mistakes_are_clear() {
        for (expression, zone, needle) in [
            ("0 9 * *", "UTC", "has 4 fields"),
            ("0 9 * * 8", "UTC", "out of range"),
            ("0 9 * * funday", "UTC", "day name"),
            ("0 99 * * *", "UTC", "invalid"),
            ("0 9 * * *", "Mars/Olympus", "unknown time zone"),
        ] {
            let err = WaveSchedule::parse(expression, zone)
                .unwrap_err()
                .to_string();
            assert!(err.contains(needle), "{expression}: {err}");
        }
    }

    #[test]
    fn schedules_that_never_fire_or_fire_too_often_are_refused() {
        for (expression, needle) in [
            ("0 0 30 2 *", "never fires"),
            ("0 0 31 4 *", "never fires"),
            ("0 0 0 1 1 * 2020", "never fires"),
            ("* * * * * *", "at least 60s"),
            ("*/30 * * * * *", "fires 30s apart"),
        ] {
            let err = WaveSchedule::parse(expression, "UTC")
                .unwrap_err()
                .to_string();
            assert!(err.contains(needle), "{expression}: {err}");
            assert!(err.contains(expression), "{expression}: {err}");
        }
        // Rare but real schedules pass: leap days, once a minute.
        for expression in ["0 0 29 2 *", "* * * * *", "0 0 1 1 *"] {
            WaveSchedule::parse(expression, "UTC").unwrap();
        }
    }
}
