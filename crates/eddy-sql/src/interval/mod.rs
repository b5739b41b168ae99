//! Feldera's interval types (datetime.md, casts.md): an interval has a
//! qualifier, `YEAR`, `YEAR TO MONTH`, `MONTH` (long intervals, a whole
//! number of months) or `DAY` … `SECOND` and the ranges between them
//! (short intervals, microseconds). The qualifier decides how the interval
//! is written (`INTERVAL '3 4' DAY TO HOUR` is `+3 04`), how many units a
//! cast to a number counts, and the type of `a + b`.
//!
//! Arrow has one interval type for all of them, so the value is an Arrow
//! `Interval(MonthDayNano)` (months alone for a long interval, nanoseconds
//! alone for a short one) and the qualifier travels as field metadata
//! under [`METADATA_KEY`], set by the functions of [`functions`] and read
//! back by [`plan::qualifier_of`]. This module holds the values: reading
//! Feldera's literals, writing its text, counting units.

pub mod functions;
pub mod plan;

use std::fmt;

/// The field metadata key holding an interval column's qualifier.
pub const METADATA_KEY: &str = "eddy.interval";

/// A unit of an interval qualifier, largest first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Unit {
    Year,
    Month,
    Day,
    Hour,
    Minute,
    Second,
}

const NANOS_PER_SECOND: i128 = 1_000_000_000;

impl Unit {
    /// The unit a word names, singular or plural (`DAY`, `days`).
    pub fn parse(word: &str) -> Option<Unit> {
        let w = word.to_ascii_uppercase();
        Some(match w.strip_suffix('S').unwrap_or(&w) {
            "YEAR" => Unit::Year,
            "MONTH" => Unit::Month,
            "DAY" => Unit::Day,
            "HOUR" => Unit::Hour,
            "MINUTE" => Unit::Minute,
            "SECOND" => Unit::Second,
            _ => return None,
        })
    }

    fn name(self) -> &'static str {
        match self {
            Unit::Year => "YEAR",
            Unit::Month => "MONTH",
            Unit::Day => "DAY",
            Unit::Hour => "HOUR",
            Unit::Minute => "MINUTE",
            Unit::Second => "SECOND",
        }
    }

    /// Whether it is a unit of long intervals.
    fn is_long(self) -> bool {
        self <= Unit::Month
    }

    /// One unit in months (long) or nanoseconds (short).
    fn size(self) -> i128 {
        match self {
            Unit::Year => 12,
            Unit::Month => 1,
            Unit::Day => 86_400 * NANOS_PER_SECOND,
            Unit::Hour => 3_600 * NANOS_PER_SECOND,
            Unit::Minute => 60 * NANOS_PER_SECOND,
            Unit::Second => NANOS_PER_SECOND,
        }
    }

    /// The largest value the unit takes when it is not the first of a
    /// qualifier (`'1 25' DAY TO HOUR` is refused).
    fn bound(self) -> Option<i128> {
        match self {
            Unit::Month => Some(12),
            Unit::Hour => Some(24),
            Unit::Minute | Unit::Second => Some(60),
            Unit::Year | Unit::Day => None,
        }
    }
}

/// An interval type: its first and last unit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Qualifier {
    pub start: Unit,
    pub end: Unit,
}

impl Qualifier {
    /// One unit.
    pub fn single(unit: Unit) -> Qualifier {
        Qualifier {
            start: unit,
            end: unit,
        }
    }

    /// `DAY`, `DAY TO HOUR`, `hours`; `None` unless both units are of one
    /// kind and in order.
    pub fn parse(text: &str) -> Option<Qualifier> {
        let words: Vec<&str> = text.split_whitespace().collect();
        let q = match words.as_slice() {
            [u] => Qualifier::single(Unit::parse(u)?),
            [a, to, b] if to.eq_ignore_ascii_case("to") => Qualifier {
                start: Unit::parse(a)?,
                end: Unit::parse(b)?,
            },
            _ => return None,
        };
        (q.start <= q.end && q.start.is_long() == q.end.is_long()).then_some(q)
    }

    /// Whether it is a long interval (years and months).
    pub fn is_long(self) -> bool {
        self.start.is_long()
    }

    /// The type of the sum of intervals of `self` and `other`: from the
    /// larger first unit to the smaller last one (`DAY TO HOUR` and `HOUR
    /// TO MINUTE` make `DAY TO MINUTE`); `None` for a long and a short.
    pub fn span(self, other: Qualifier) -> Option<Qualifier> {
        (self.is_long() == other.is_long()).then(|| Qualifier {
            start: self.start.min(other.start),
            end: self.end.max(other.end),
        })
    }

    fn units(self) -> impl Iterator<Item = Unit> {
        [
            Unit::Year,
            Unit::Month,
            Unit::Day,
            Unit::Hour,
            Unit::Minute,
            Unit::Second,
        ]
        .into_iter()
        .filter(move |u| *u >= self.start && *u <= self.end)
    }
}

impl fmt::Display for Qualifier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.start == self.end {
            write!(f, "{}", self.start.name())
        } else {
            write!(f, "{} TO {}", self.start.name(), self.end.name())
        }
    }
}

/// Why an interval could not be read or computed.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum IntervalError {
    #[error("'{text}' is not an interval of type INTERVAL {qualifier}")]
    Format { text: String, qualifier: Qualifier },
    #[error("an interval of type INTERVAL {0} is out of range")]
    Overflow(Qualifier),
}

/// Feldera's text of an interval of `q` holding `amount` (months for a
/// long interval, nanoseconds for a short one): a sign, then the units of
/// the qualifier, the last truncated toward zero (`+10-01`, `-3683 00:00`,
/// `+88392:00:00.000000`; the sign is that of the truncated value). Seconds have six digits of fraction, except
/// after days, where they have none when they are whole (as Feldera
/// writes them).
pub fn text(amount: i128, q: Qualifier) -> String {
    // The sign of what is written: `-11` months as YEAR is `+0`.
    let shown = match q.end {
        Unit::Second => amount / 1_000,
        _ => count(amount, q),
    };
    let sign = if shown < 0 { '-' } else { '+' };
    let a = amount.unsigned_abs();
    if q.is_long() {
        let (y, m) = (a / 12, a % 12);
        return match (q.start, q.end) {
            (Unit::Year, Unit::Year) => format!("{sign}{y}"),
            (Unit::Year, _) => format!("{sign}{y}-{m:02}"),
            _ => format!("{sign}{a}"),
        };
    }
    let micros = a / 1_000;
    let (d, h_all, m_all, s_all) = (
        micros / 86_400_000_000,
        micros / 3_600_000_000,
        micros / 60_000_000,
        micros / 1_000_000,
    );
    let (h, m, s, frac) = (h_all % 24, m_all % 60, s_all % 60, micros % 1_000_000);
    let body = match (q.start, q.end) {
        (Unit::Day, Unit::Day) => format!("{d}"),
        (Unit::Day, Unit::Hour) => format!("{d} {h:02}"),
        (Unit::Day, Unit::Minute) => format!("{d} {h:02}:{m:02}"),
        (Unit::Day, _) if frac == 0 => format!("{d} {h:02}:{m:02}:{s:02}"),
        (Unit::Day, _) => format!("{d} {h:02}:{m:02}:{s:02}.{frac:06}"),
        (Unit::Hour, Unit::Hour) => format!("{h_all}"),
        (Unit::Hour, Unit::Minute) => format!("{h_all}:{m:02}"),
        (Unit::Hour, _) => format!("{h_all}:{m:02}:{s:02}.{frac:06}"),
        (Unit::Minute, Unit::Minute) => format!("{m_all}"),
        (Unit::Minute, _) => format!("{m_all}:{s:02}.{frac:06}"),
        _ => format!("{s_all}.{frac:06}"),
    };
    format!("{sign}{body}")
}

/// How many of the qualifier's last unit `amount` holds, truncated toward
/// zero: `CAST(INTERVAL '10.6' SECOND AS INTEGER)` is 10 (casts.md).
pub fn count(amount: i128, q: Qualifier) -> i128 {
    amount / q.end.size()
}

/// The amount (months or nanoseconds) of Feldera's interval literal `text`
/// of type `q`: `'20-07'` YEAR TO MONTH, `'10 10:30:40.999'` DAY TO
/// SECOND, `'-80.001'` SECOND, a sign first when there is one. Only
/// seconds may have a fraction; a unit after the first must be below its
/// bound (`'1 24'` DAY TO HOUR is refused).
pub fn parse(text: &str, q: Qualifier) -> Result<i128, IntervalError> {
    let refuse = || IntervalError::Format {
        text: text.to_string(),
        qualifier: q,
    };
    let t = text.trim();
    let (negative, t) = match t.as_bytes().first() {
        Some(b'-') => (true, &t[1..]),
        Some(b'+') => (false, &t[1..]),
        _ => (false, t),
    };
    let separators: &[char] = if q.is_long() { &['-'] } else { &[' ', ':'] };
    let parts: Vec<&str> = t.trim_start().split(separators).collect();
    let units: Vec<Unit> = q.units().collect();
    if parts.len() != units.len() {
        return Err(refuse());
    }
    let mut amount: i128 = 0;
    for (i, (part, unit)) in parts.iter().zip(&units).enumerate() {
        let (whole, fraction) = match part.split_once('.') {
            Some((w, f)) if *unit == Unit::Second => (w, f),
            Some(_) => return Err(refuse()),
            None => (*part, ""),
        };
        let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
        if !digits(whole) || !(fraction.is_empty() || digits(fraction)) {
            return Err(refuse());
        }
        let n: i128 = whole.parse().map_err(|_| IntervalError::Overflow(q))?;
        if i > 0 && unit.bound().is_some_and(|b| n >= b) {
            return Err(refuse());
        }
        let nanos_of_fraction: i128 = format!("{fraction:0<9}")[..9]
            .parse()
            .map_err(|_| refuse())?;
        amount = n
            .checked_mul(unit.size())
            .and_then(|x| x.checked_add(nanos_of_fraction))
            .and_then(|x| x.checked_add(amount))
            .ok_or(IntervalError::Overflow(q))?;
    }
    Ok(if negative { -amount } else { amount })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(s: &str) -> Qualifier {
        Qualifier::parse(s).unwrap()
    }

    const DAY: i128 = 86_400 * NANOS_PER_SECOND;
    const HOUR: i128 = 3_600 * NANOS_PER_SECOND;

    #[test]
    fn qualifiers_are_read_and_combined() {
        assert_eq!(q("days").to_string(), "DAY");
        assert_eq!(q("day to  hour").to_string(), "DAY TO HOUR");
        assert!(Qualifier::parse("HOUR TO DAY").is_none());
        assert!(Qualifier::parse("YEAR TO DAY").is_none());
        assert_eq!(
            q("DAY TO HOUR").span(q("HOUR TO MINUTE")),
            Some(q("DAY TO MINUTE"))
        );
        assert_eq!(q("YEAR").span(q("MONTH")), Some(q("YEAR TO MONTH")));
        assert_eq!(q("YEAR").span(q("DAY")), None);
    }

    #[test]
    fn intervals_are_written_as_feldera_writes_them() {
        let diff = 3683 * DAY;
        assert_eq!(text(diff, q("SECOND")), "+318211200.000000");
        assert_eq!(text(diff, q("MINUTE")), "+5303520");
        assert_eq!(text(-diff, q("HOUR")), "-88392");
        assert_eq!(text(diff, q("DAY TO HOUR")), "+3683 00");
        assert_eq!(text(diff, q("DAY TO MINUTE")), "+3683 00:00");
        assert_eq!(text(diff, q("DAY TO SECOND")), "+3683 00:00:00");
        assert_eq!(text(diff, q("HOUR TO MINUTE")), "+88392:00");
        assert_eq!(text(diff, q("HOUR TO SECOND")), "+88392:00:00.000000");
        assert_eq!(text(diff, q("MINUTE TO SECOND")), "+5303520:00.000000");
        let t = 5 * HOUR + 45 * 60 * NANOS_PER_SECOND + 33 * NANOS_PER_SECOND;
        assert_eq!(text(t, q("HOUR TO MINUTE")), "+5:45");
        assert_eq!(text(-t, q("HOUR TO SECOND")), "-5:45:33.000000");
        let frac = 379 * DAY + 11 * HOUR + 842_717_770_000;
        assert_eq!(text(-frac, q("DAY TO SECOND")), "-379 11:14:02.717770");
        assert_eq!(text(121, q("MONTH")), "+121");
        assert_eq!(text(121, q("YEAR")), "+10");
        assert_eq!(text(121, q("YEAR TO MONTH")), "+10-01");
        assert_eq!(text(-32, q("YEAR")), "-2");
        assert_eq!(text(-11, q("YEAR")), "+0");
        assert_eq!(text(-500_000_000, q("SECOND")), "-0.500000");
        assert_eq!(text(-500_000_000, q("MINUTE")), "+0");
        assert_eq!(text(-2, q("YEAR TO MONTH")), "-0-02");
    }

    #[test]
    fn literals_are_read_by_their_qualifier() {
        assert_eq!(parse("20-07", q("YEAR TO MONTH")), Ok(247));
        assert_eq!(parse("+5-0", q("YEAR TO MONTH")), Ok(60));
        assert_eq!(parse("10", q("YEARS")), Ok(120));
        assert_eq!(parse("10 10", q("DAY TO HOUR")), Ok(10 * DAY + 10 * HOUR));
        assert_eq!(
            parse("-1 2:03:04", q("DAY TO SECOND")),
            Ok(-(DAY + 2 * HOUR + 3 * 60 * NANOS_PER_SECOND + 4 * NANOS_PER_SECOND))
        );
        assert_eq!(
            parse("80:01.001", q("MINUTE TO SECOND")),
            Ok(80 * 60 * NANOS_PER_SECOND + NANOS_PER_SECOND + 1_000_000)
        );
        assert_eq!(
            parse("+318211200.000000", q("SECOND")),
            Ok(318_211_200 * NANOS_PER_SECOND)
        );
        assert_eq!(parse("-980", q("DAY")), Ok(-980 * DAY));
        for bad in ["1 24", "1", "1 2 3", "x 1", "1.5 2"] {
            assert!(parse(bad, q("DAY TO HOUR")).is_err(), "{bad}");
        }
        assert!(parse("10.5", q("DAY")).is_err());
        assert!(parse("1-12", q("YEAR TO MONTH")).is_err());
    }

    #[test]
    fn casts_count_the_last_unit() {
        assert_eq!(count(10 * DAY, q("DAY")), 10);
        assert_eq!(count(10_600_000_000, q("SECOND")), 10);
        assert_eq!(count(-10_600_000_000, q("SECOND")), -10);
        assert_eq!(count(121, q("YEAR")), 10);
        assert_eq!(count(121, q("YEAR TO MONTH")), 121);
    }
}
