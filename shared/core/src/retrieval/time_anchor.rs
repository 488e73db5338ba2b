//! Dates a query names ("on 29 Dec 2023", "before January 4th, 2024", "on 21.01.2024"): Stage 4 favours the
//! memories created then. Only full dates with a four-digit year count; relative phrases ("last week") do not.

use chrono::{DateTime, Duration, NaiveDate, Utc};

/// A day as the query names it, with how it relates to the memories asked about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimeAnchor {
    On(NaiveDate),
    Before(NaiveDate),
    After(NaiveDate),
}

/// Slack around a named day: the speaker's time zone is unknown, so a day covers 12 hours either side of it in UTC.
const SLACK_HOURS: i64 = 12;
/// A day is talked about on it or in the days after ("yesterday we..."): memories this many days later are of it.
const TOLD_WITHIN_DAYS: i64 = 2;

impl TimeAnchor {
    /// Whether a memory created at `at` is of the time the anchor names.
    pub fn contains(&self, at: DateTime<Utc>) -> bool {
        let start = |d: NaiveDate| d.and_hms_opt(0, 0, 0).expect("midnight exists").and_utc();
        let slack = Duration::hours(SLACK_HOURS);
        match *self {
            Self::On(day) => at >= start(day) - slack && at < start(day) + Duration::days(1 + TOLD_WITHIN_DAYS) + slack,
            Self::Before(day) => at < start(day) + Duration::days(TOLD_WITHIN_DAYS) + slack,
            Self::After(day) => at >= start(day) - slack,
        }
    }
}

/// Whether a memory created at `at` is of the time the query names: on one of its days (if it names any), and
/// within all of its bounds ("after X and before Y" is the span between). True when it names none.
pub fn of_the_time(anchors: &[TimeAnchor], at: DateTime<Utc>) -> bool {
    let is_day = |a: &&TimeAnchor| matches!(a, TimeAnchor::On(_));
    let mut days = anchors.iter().filter(is_day).peekable();
    (days.peek().is_none() || days.any(|d| d.contains(at)))
        && anchors.iter().filter(|a| !is_day(a)).all(|b| b.contains(at))
}

/// The dates named in `text`, in order.
pub fn named(text: &str) -> Vec<TimeAnchor> {
    let tokens: Vec<String> = text
        .split(|c: char| c.is_whitespace() || c == ',' || c == '?' || c == '!' || c == ';')
        .map(|t| t.trim_matches(|c: char| !c.is_alphanumeric()).to_lowercase())
        .filter(|t| !t.is_empty())
        .collect();
    let mut anchors = Vec::new();
    let mut i = 0;
    while i < tokens.len() {
        let (date, used) = match numeric_date(&tokens[i]) {
            Some(date) => (Some(date), 1),
            // "2nd of january 2024"
            None if tokens.get(i + 1).is_some_and(|t| t == "of") && day_of(&tokens[i]).is_some() => {
                let rest = [
                    tokens[i].clone(),
                    tokens.get(i + 2).cloned().unwrap_or_default(),
                    tokens.get(i + 3).cloned().unwrap_or_default(),
                ];
                (spelled_date(&rest), 4)
            }
            None => (spelled_date(&tokens[i..]), 3),
        };
        match date {
            Some(date) => {
                let previous = |n: usize| i.checked_sub(n).map(|p| tokens[p].as_str());
                // "from the 2nd of ...": the article does not count.
                let skip = usize::from(previous(1) == Some("the"));
                let anchor = match (previous(2 + skip), previous(1 + skip)) {
                    (_, Some("before" | "until" | "by")) | (Some("prior"), Some("to")) => TimeAnchor::Before(date),
                    (_, Some("after" | "since" | "from")) => TimeAnchor::After(date),
                    _ => TimeAnchor::On(date),
                };
                anchors.push(anchor);
                i += used;
            }
            None => i += 1,
        }
    }
    anchors
}

/// 21.01.2024 (day first), 2024-01-21, 1/21/2024 (month first, or day first when the first number cannot be a
/// month).
fn numeric_date(token: &str) -> Option<NaiveDate> {
    let parts = |separator: char| -> Option<Vec<u32>> {
        let parts: Vec<&str> = token.split(separator).collect();
        (parts.len() == 3 && parts.iter().all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit())))
            .then(|| parts.iter().map(|p| p.parse().ok()).collect::<Option<Vec<u32>>>())?
    };
    let year = |y: u32| (1000..=9999).contains(&y).then_some(y as i32);
    if let Some(p) = parts('.') {
        return NaiveDate::from_ymd_opt(year(p[2])?, p[1], p[0]);
    }
    if let Some(p) = parts('-') {
        return NaiveDate::from_ymd_opt(year(p[0])?, p[1], p[2]);
    }
    let p = parts('/')?;
    let y = year(p[2])?;
    NaiveDate::from_ymd_opt(y, p[0], p[1]).or_else(|| NaiveDate::from_ymd_opt(y, p[1], p[0]))
}

/// "29 dec 2023", "5 january 2024", "january 6 2024", "december 23rd 2023" (commas already split off).
fn spelled_date(tokens: &[String]) -> Option<NaiveDate> {
    let [a, b, c, ..] = tokens else { return None };
    let year: i32 = c.parse().ok().filter(|y| (1000..=9999).contains(y))?;
    let (day, month) = match (day_of(a), month_of(b)) {
        (Some(d), Some(m)) => (d, m),
        _ => (day_of(b)?, month_of(a)?),
    };
    NaiveDate::from_ymd_opt(year, month, day)
}

fn day_of(token: &str) -> Option<u32> {
    let digits = token.trim_end_matches(|c: char| c.is_ascii_alphabetic());
    let suffix = &token[digits.len()..];
    (matches!(suffix, "" | "st" | "nd" | "rd" | "th") && (1..=2).contains(&digits.len()))
        .then(|| digits.parse().ok())?
}

fn month_of(token: &str) -> Option<u32> {
    let full = [
        "january",
        "february",
        "march",
        "april",
        "may",
        "june",
        "july",
        "august",
        "september",
        "october",
        "november",
        "december",
    ];
    // A name or an abbreviation of at least three letters ("sep", "sept", "september").
    (token.len() >= 3).then(|| full.iter().position(|m| m.starts_with(token)))?.map(|i| i as u32 + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn day(y: i32, m: u32, d: u32) -> NaiveDate {
        NaiveDate::from_ymd_opt(y, m, d).unwrap()
    }

    #[test]
    fn finds_the_dates_questions_name_in_their_usual_forms() {
        use TimeAnchor::*;
        let cases = [
            ("What kind of pasta did Kate make on 29 Dec 2023?", vec![On(day(2023, 12, 29))]),
            ("What happened to Elise in the library on 5 January 2024?", vec![On(day(2024, 1, 5))]),
            ("What sport did Kevin play with his friends on 21.01.2024?", vec![On(day(2024, 1, 21))]),
            ("How many naps on January 6 2024?", vec![On(day(2024, 1, 6))]),
            ("Did Vanessa take the test before December 23rd, 2023?", vec![Before(day(2023, 12, 23))]),
            ("Anything after 2024-02-03 or on 2/14/2024?", vec![After(day(2024, 2, 3)), On(day(2024, 2, 14))]),
            ("What changed from the 2nd of January 2024?", vec![After(day(2024, 1, 2))]),
            ("Was it prior to 5 May 2023?", vec![Before(day(2023, 5, 5))]),
        ];
        for (text, expected) in cases {
            assert_eq!(named(text), expected, "{text}");
        }
    }

    #[test]
    fn any_text_reads_without_panicking_and_yields_only_real_dates() {
        // Strings drawn from pieces that look like dates, in every script the service meets.
        let pieces = [
            "1",
            "21",
            "31",
            ".",
            "/",
            "-",
            "2024",
            "01.02.2024",
            "jan",
            "May",
            "of",
            "before",
            "on",
            "é",
            "東京",
            "🚀",
            " ",
            ",",
            "?",
            "2nd",
            "th",
            "99999",
            "0",
        ];
        let mut seed: u64 = 0x2545_f491_4f6c_dd1d;
        for _ in 0..20_000 {
            let mut text = String::new();
            for _ in 0..(seed % 9) {
                seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
                text.push_str(pieces[(seed >> 33) as usize % pieces.len()]);
                if seed & 1 == 0 {
                    text.push(' ');
                }
            }
            seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
            for anchor in named(&text) {
                let (TimeAnchor::On(d) | TimeAnchor::Before(d) | TimeAnchor::After(d)) = anchor;
                assert!((1000..=9999).contains(&chrono::Datelike::year(&d)), "{text:?} gave {d}");
            }
        }
    }

    #[test]
    fn titles_relative_phrases_and_impossible_dates_are_not_dates() {
        for text in [
            "When did he start reading \"11/22/63\" by Stephen King?",
            "What did we decide last week?",
            "may 5 agents share a task",
            "on 31.02.2024",
            "version 1.2.3",
        ] {
            assert!(named(text).is_empty(), "{text}: {:?}", named(text));
        }
    }

    #[test]
    fn days_are_alternatives_and_bounds_all_hold() {
        let at = |s: &str| s.parse::<DateTime<Utc>>().unwrap();
        let span = named("what happened after 2024-01-01 and before 2024-01-10?");
        assert!(of_the_time(&span, at("2024-01-05T10:00:00Z")));
        assert!(!of_the_time(&span, at("2024-01-20T10:00:00Z")));
        assert!(!of_the_time(&span, at("2023-12-20T10:00:00Z")));
        let days = named("on 3 Jan 2024 or on 9 Jan 2024");
        assert!(of_the_time(&days, at("2024-01-09T10:00:00Z")) && !of_the_time(&days, at("2024-01-07T10:00:00Z")));
        assert!(of_the_time(&[], at("2020-01-01T00:00:00Z")));
    }

    #[test]
    fn a_named_day_covers_the_day_and_the_two_after_with_half_a_day_of_slack() {
        let at = |s: &str| s.parse::<DateTime<Utc>>().unwrap();
        let on = TimeAnchor::On(day(2024, 1, 21));
        assert!(on.contains(at("2024-01-21T23:59:00Z")));
        assert!(on.contains(at("2024-01-20T13:00:00Z")));
        assert!(!on.contains(at("2024-01-20T11:00:00Z")));
        // Told about in the two days after.
        assert!(on.contains(at("2024-01-23T20:00:00Z")));
        assert!(!on.contains(at("2024-01-24T12:00:00Z")));
        let before = TimeAnchor::Before(day(2024, 1, 4));
        assert!(before.contains(at("2024-01-05T10:00:00Z")) && !before.contains(at("2024-01-06T13:00:00Z")));
    }
}
