//! When a schedule trigger is due: the occurrence a tick at `now` fires
//! (at most one, however long the sidecar was down), its activity key and
//! the words that describe it.
//!
//! Times are epoch milliseconds on the sidecar's clock, which the caller
//! passes in (tests drive it). A weekly schedule's local time becomes an
//! instant in its IANA zone the way Seed's service computes it, so a
//! trigger fires at the same instant on either server: the wall time read
//! as UTC is corrected by the zone's offset three times, the last
//! correction unchecked. A time that does not exist (the spring-forward
//! gap) therefore moves by the gap towards the offset in effect (an hour
//! later west of Greenwich, an hour earlier east of it), and an ambiguous
//! one (fall-back) is the earlier instant west of Greenwich and the later
//! one east of it.

use chrono::{DateTime, Datelike, Days, NaiveDate, TimeZone, Timelike, Utc};
use chrono_tz::Tz;
use serde_json::{json, Map, Value};

const MINUTE_MS: i64 = 60_000;
const HOUR_MS: i64 = 3_600_000;

/// An interval's unit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IntervalUnit {
    Minutes,
    Hours,
}

impl IntervalUnit {
    pub fn as_str(self) -> &'static str {
        match self {
            IntervalUnit::Minutes => "minutes",
            IntervalUnit::Hours => "hours",
        }
    }

    fn millis(self) -> i64 {
        match self {
            IntervalUnit::Minutes => MINUTE_MS,
            IntervalUnit::Hours => HOUR_MS,
        }
    }
}

/// A schedule, validated: a zone is one the database knows, kept as the
/// client wrote it.
#[derive(Clone, Debug, PartialEq)]
pub enum Schedule {
    /// Every `every` units after the last firing (or the trigger's creation).
    Interval { every: u64, unit: IntervalUnit },
    /// On these days (0 = Sunday … 6 = Saturday) at `hour:minute` in `zone`.
    Weekly {
        days: Vec<u8>,
        hour: u32,
        minute: u32,
        /// As written; `tz` is what it names.
        timezone: String,
        tz: Tz,
    },
    /// Once, at `run_at` (the zone only says how a client showed it).
    Once {
        run_at: i64,
        timezone: Option<String>,
    },
}

impl Schedule {
    pub fn kind(&self) -> &'static str {
        match self {
            Schedule::Interval { .. } => "interval",
            Schedule::Weekly { .. } => "weekly",
            Schedule::Once { .. } => "once",
        }
    }

    fn timezone(&self) -> Option<&str> {
        match self {
            Schedule::Weekly { timezone, .. } => Some(timezone),
            Schedule::Once { timezone, .. } => timezone.as_deref(),
            Schedule::Interval { .. } => None,
        }
    }
}

/// What a trigger's schedule is measured from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ScheduleState {
    pub trigger_created_at: i64,
    pub last_fired_at: Option<i64>,
}

/// One firing a tick owes.
#[derive(Clone, Debug, PartialEq)]
pub struct Occurrence {
    /// The instant it was due (its identity: the key is built from it).
    pub scheduled_at: i64,
    /// `schedule:<trigger id>:<scheduled at>`, unique per trigger.
    pub activity_key: String,
    /// What the firing records and the agent reads.
    pub activity: Value,
    /// How a session it starts is titled, after the trigger's name.
    pub summary: String,
}

/// The occurrence `schedule` owes at `now`, if any. Interval: the last
/// firing plus the interval, once that has passed (one catch-up after
/// downtime; the next is measured from that firing). Once: `run_at` when
/// it has passed and the trigger never fired. Weekly: the latest local
/// occurrence of the last week that has passed, not before the trigger
/// was created and after its last firing.
pub fn due(
    trigger_id: &str,
    schedule: &Schedule,
    state: ScheduleState,
    now: i64,
) -> Option<Occurrence> {
    let after = state.last_fired_at.unwrap_or(state.trigger_created_at);
    let scheduled_at = match schedule {
        Schedule::Interval { every, unit } => {
            let every = i64::try_from(*every).unwrap_or(i64::MAX);
            let next = after.saturating_add(every.saturating_mul(unit.millis()));
            (now >= next).then_some(next)
        }
        Schedule::Once { run_at, .. } => {
            (state.last_fired_at.is_none() && now >= *run_at).then_some(*run_at)
        }
        Schedule::Weekly {
            days,
            hour,
            minute,
            tz,
            ..
        } => latest_weekly(days, *hour, *minute, tz, now, state.trigger_created_at)
            .filter(|at| *at > after),
    }?;
    let mut activity = Map::new();
    activity.insert("type".into(), json!("schedule"));
    activity.insert("scheduleKind".into(), json!(schedule.kind()));
    activity.insert("scheduledAt".into(), json!(scheduled_at));
    activity.insert("firedAt".into(), json!(now));
    if let Some(zone) = schedule.timezone() {
        activity.insert("timezone".into(), json!(zone));
    }
    Some(Occurrence {
        scheduled_at,
        activity_key: format!("schedule:{trigger_id}:{scheduled_at}"),
        activity: Value::Object(activity),
        summary: title_summary(schedule, scheduled_at),
    })
}

/// The words after a trigger's name in the title of a session a schedule
/// starts.
fn title_summary(schedule: &Schedule, scheduled_at: i64) -> String {
    match schedule {
        Schedule::Interval { .. } => format!("Scheduled interval at {}", iso(scheduled_at)),
        Schedule::Once { .. } => format!("One-time schedule at {}", iso(scheduled_at)),
        Schedule::Weekly {
            hour,
            minute,
            timezone,
            ..
        } => format!("Scheduled weekly run at {hour:02}:{minute:02} {timezone}"),
    }
}

/// How a schedule firing's activity is summarized where the firing is shown
/// (the trigger context, a session's `startedByTrigger`).
pub fn activity_summary(activity: &Value) -> String {
    let kind = activity["scheduleKind"].as_str().unwrap_or("schedule");
    match activity["scheduledAt"].as_i64() {
        Some(at) if at != 0 => format!("Scheduled {kind} at {}", iso(at)),
        _ => "Scheduled run".to_owned(),
    }
}

/// An instant as JavaScript's `toISOString` writes it (milliseconds, `Z`).
pub fn iso(ms: i64) -> String {
    match Utc.timestamp_millis_opt(ms).single() {
        Some(at) => at.format("%Y-%m-%dT%H:%M:%S%.3fZ").to_string(),
        None => ms.to_string(),
    }
}

/// An instant's local calendar fields in `tz`, to the minute.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct LocalParts {
    year: i32,
    month: u32,
    day: u32,
    hour: u32,
    minute: u32,
    /// 0 = Sunday.
    weekday: u8,
}

fn local_parts(ms: i64, tz: &Tz) -> Option<LocalParts> {
    let at: DateTime<Tz> = Utc.timestamp_millis_opt(ms).single()?.with_timezone(tz);
    Some(LocalParts {
        year: at.year(),
        month: at.month(),
        day: at.day(),
        hour: at.hour(),
        minute: at.minute(),
        weekday: at.weekday().num_days_from_sunday() as u8,
    })
}

/// The wall time `date hour:minute` read as if it were UTC.
fn wall_as_utc(date: NaiveDate, hour: u32, minute: u32) -> Option<i64> {
    Some(
        date.and_hms_opt(hour, minute, 0)?
            .and_utc()
            .timestamp_millis(),
    )
}

/// The instant of a local wall time in `tz`: the wall time read as UTC,
/// corrected three times by how far the zone's reading of the guess is
/// from the wanted wall time (see the module's paragraph for gaps and
/// overlaps).
fn local_to_instant(date: NaiveDate, hour: u32, minute: u32, tz: &Tz) -> Option<i64> {
    let wanted = wall_as_utc(date, hour, minute)?;
    let mut guess = wanted;
    for _ in 0..3 {
        let seen = local_parts(guess, tz)?;
        let seen = wall_as_utc(
            NaiveDate::from_ymd_opt(seen.year, seen.month, seen.day)?,
            seen.hour,
            seen.minute,
        )?;
        let diff = wanted - seen;
        if diff == 0 {
            break;
        }
        guess += diff;
    }
    Some(guess)
}

/// The latest occurrence at or before `now` and at or after `created_at`
/// among the local dates of the last week: each probe is the local date,
/// in `tz`, of noon UTC on today's local date minus 0 to 7 days.
fn latest_weekly(
    days: &[u8],
    hour: u32,
    minute: u32,
    tz: &Tz,
    now: i64,
    created_at: i64,
) -> Option<i64> {
    let today = local_parts(now, tz)?;
    let today = NaiveDate::from_ymd_opt(today.year, today.month, today.day)?;
    let mut latest: Option<i64> = None;
    for back in 0..=7u64 {
        let Some(probe) = today.checked_sub_days(Days::new(back)) else {
            continue;
        };
        let Some(noon) = wall_as_utc(probe, 12, 0) else {
            continue;
        };
        let Some(local) = local_parts(noon, tz) else {
            continue;
        };
        if !days.contains(&local.weekday) {
            continue;
        }
        let Some(date) = NaiveDate::from_ymd_opt(local.year, local.month, local.day) else {
            continue;
        };
        let Some(candidate) = local_to_instant(date, hour, minute, tz) else {
            continue;
        };
        if candidate <= now && candidate >= created_at && latest.is_none_or(|l| candidate > l) {
            latest = Some(candidate);
        }
    }
    latest
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> i64 {
        DateTime::parse_from_rfc3339(text)
            .expect("a test instant")
            .timestamp_millis()
    }

    fn tz(name: &str) -> Tz {
        Tz::from_str_insensitive(name).expect("a test zone")
    }

    fn local(zone: &str, date: (i32, u32, u32), hour: u32, minute: u32) -> String {
        let date = NaiveDate::from_ymd_opt(date.0, date.1, date.2).expect("a test date");
        iso(local_to_instant(date, hour, minute, &tz(zone)).expect("an instant"))
    }

    #[test]
    fn local_times_become_the_instants_seeds_service_computes() {
        // Ordinary times.
        assert_eq!(
            local("Asia/Kolkata", (2026, 6, 1), 9, 0),
            "2026-06-01T03:30:00.000Z"
        );
        assert_eq!(
            local("Europe/Berlin", (2026, 7, 1), 9, 30),
            "2026-07-01T07:30:00.000Z"
        );
        // Spring forward: 02:30 does not exist; east of Greenwich it moves
        // an hour earlier, west of it an hour later.
        assert_eq!(
            local("Europe/Berlin", (2026, 3, 29), 2, 30),
            "2026-03-29T00:30:00.000Z"
        );
        assert_eq!(
            local("America/New_York", (2026, 3, 8), 2, 30),
            "2026-03-08T07:30:00.000Z"
        );
        assert_eq!(
            local("Australia/Lord_Howe", (2026, 10, 4), 2, 15),
            "2026-10-03T15:15:00.000Z"
        );
        // Fall back: 02:30 happens twice in Berlin (the later, CET, is
        // chosen); 01:30 twice in New York (the earlier, EDT).
        assert_eq!(
            local("Europe/Berlin", (2026, 10, 25), 2, 30),
            "2026-10-25T01:30:00.000Z"
        );
        assert_eq!(
            local("America/New_York", (2026, 11, 1), 1, 30),
            "2026-11-01T05:30:00.000Z"
        );
    }

    fn weekly(days: &[u8], time: (u32, u32), zone: &str) -> Schedule {
        Schedule::Weekly {
            days: days.to_vec(),
            hour: time.0,
            minute: time.1,
            timezone: zone.to_owned(),
            tz: tz(zone),
        }
    }

    fn state(created: &str, fired: Option<&str>) -> ScheduleState {
        ScheduleState {
            trigger_created_at: at(created),
            last_fired_at: fired.map(at),
        }
    }

    #[test]
    fn a_weekly_schedule_fires_its_latest_missed_occurrence_once() {
        // Sunday 2026-03-29 (spring forward in Berlin) at 02:30 local.
        let schedule = weekly(&[0], (2, 30), "Europe/Berlin");
        let created = state("2026-03-01T00:00:00Z", None);
        assert_eq!(
            due("t", &schedule, created, at("2026-03-29T00:29:59Z")).map(|o| o.scheduled_at),
            Some(at("2026-03-22T01:30:00Z"))
        );
        let o = due("t", &schedule, created, at("2026-03-29T00:30:00Z")).expect("due");
        assert_eq!(iso(o.scheduled_at), "2026-03-29T00:30:00.000Z");
        assert_eq!(
            o.activity_key,
            format!("schedule:t:{}", at("2026-03-29T00:30:00Z"))
        );
        assert_eq!(o.summary, "Scheduled weekly run at 02:30 Europe/Berlin");
        assert_eq!(
            o.activity,
            json!({"type": "schedule", "scheduleKind": "weekly", "scheduledAt": o.scheduled_at,
                   "firedAt": at("2026-03-29T00:30:00Z"), "timezone": "Europe/Berlin"})
        );
        assert_eq!(
            activity_summary(&o.activity),
            "Scheduled weekly at 2026-03-29T00:30:00.000Z"
        );
        // Fired: nothing more until the next Sunday.
        let fired = state("2026-03-01T00:00:00Z", Some("2026-03-29T00:30:05Z"));
        assert_eq!(due("t", &schedule, fired, at("2026-04-04T12:00:00Z")), None);
        assert_eq!(
            due("t", &schedule, fired, at("2026-04-05T01:00:00Z")).map(|o| iso(o.scheduled_at)),
            Some("2026-04-05T00:30:00.000Z".to_owned())
        );
        // Fall back: 2026-10-25 02:30 in Berlin is the later instant.
        let created = state("2026-10-20T00:00:00Z", None);
        assert_eq!(
            due("t", &schedule, created, at("2026-10-25T01:29:00Z")),
            None
        );
        assert_eq!(
            due("t", &schedule, created, at("2026-10-25T01:30:00Z")).map(|o| iso(o.scheduled_at)),
            Some("2026-10-25T01:30:00.000Z".to_owned())
        );
        // Down for three weeks: one firing, the latest.
        let down = state("2026-05-01T00:00:00Z", Some("2026-05-03T00:30:00Z"));
        assert_eq!(
            due("t", &schedule, down, at("2026-05-27T12:00:00Z")).map(|o| iso(o.scheduled_at)),
            Some("2026-05-24T00:30:00.000Z".to_owned())
        );
    }

    #[test]
    fn a_weekly_occurrence_before_the_trigger_existed_never_fires() {
        let schedule = weekly(&[1, 3], (9, 0), "UTC");
        // Created Wednesday 10:00, after that day's 09:00.
        let created = state("2026-06-03T10:00:00Z", None);
        assert_eq!(
            due("t", &schedule, created, at("2026-06-04T12:00:00Z")),
            None
        );
        assert_eq!(
            due("t", &schedule, created, at("2026-06-08T09:00:00Z")).map(|o| iso(o.scheduled_at)),
            Some("2026-06-08T09:00:00.000Z".to_owned())
        );
    }

    #[test]
    fn an_interval_catches_up_once_and_counts_from_its_last_firing() {
        let schedule = Schedule::Interval {
            every: 15,
            unit: IntervalUnit::Minutes,
        };
        let created = state("2026-01-01T00:00:00Z", None);
        assert_eq!(
            due("t", &schedule, created, at("2026-01-01T00:14:59Z")),
            None
        );
        let o = due("t", &schedule, created, at("2026-01-01T00:15:00Z")).expect("due");
        assert_eq!(o.summary, "Scheduled interval at 2026-01-01T00:15:00.000Z");
        assert_eq!(o.activity["timezone"], Value::Null);
        // After a day down: one firing, due at the first missed instant.
        let o = due("t", &schedule, created, at("2026-01-02T00:00:00Z")).expect("due");
        assert_eq!(iso(o.scheduled_at), "2026-01-01T00:15:00.000Z");
        let fired = state("2026-01-01T00:00:00Z", Some("2026-01-02T00:00:00Z"));
        assert_eq!(due("t", &schedule, fired, at("2026-01-02T00:14:00Z")), None);
        let hours = Schedule::Interval {
            every: 2,
            unit: IntervalUnit::Hours,
        };
        assert!(due("t", &hours, created, at("2026-01-01T01:59:59Z")).is_none());
        assert!(due("t", &hours, created, at("2026-01-01T02:00:00Z")).is_some());
    }

    #[test]
    fn a_once_schedule_fires_when_due_and_never_again() {
        let schedule = Schedule::Once {
            run_at: at("2026-02-01T08:00:00Z"),
            timezone: Some("Europe/Paris".into()),
        };
        // A past run time is due at the first tick, even before creation.
        let created = state("2026-03-01T00:00:00Z", None);
        let o = due("t", &schedule, created, at("2026-03-01T00:00:01Z")).expect("due");
        assert_eq!(o.summary, "One-time schedule at 2026-02-01T08:00:00.000Z");
        assert_eq!(o.activity["timezone"], "Europe/Paris");
        let fired = state("2026-03-01T00:00:00Z", Some("2026-03-01T00:00:01Z"));
        assert_eq!(due("t", &schedule, fired, at("2027-01-01T00:00:00Z")), None);
    }

    #[test]
    fn zones_far_east_probe_the_same_week() {
        // UTC+13: noon UTC is already the next local day.
        let schedule = weekly(&[2], (7, 0), "Pacific/Tongatapu");
        let created = state("2026-01-01T00:00:00Z", None);
        // Tuesday 2026-06-09 07:00 local = Monday 18:00 UTC.
        assert_eq!(
            due("t", &schedule, created, at("2026-06-08T18:00:00Z")).map(|o| iso(o.scheduled_at)),
            Some("2026-06-08T18:00:00.000Z".to_owned())
        );
        assert_eq!(activity_summary(&json!({})), "Scheduled run");
    }
}
