//! Sizes and durations written as Feldera's newer runtime settings write
//! them: `"16G"`, `"4Gi"`, `"10MiB"` (decimal or binary units, an optional
//! `B`, a fraction rounded to the nearest byte; a bare number is bytes),
//! and `"1h30m"`, `"250ms"` (terms of a number and a unit, summed; `"0"`).

use serde::de::{Deserializer, Error};
use serde::Deserialize;

/// A size in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Size(pub u64);

/// A duration in nanoseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Span(pub u128);

/// Why a size or a duration does not read (each variant holds what was
/// written, and the part of it that is wrong).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[allow(missing_docs)]
pub enum UnitError {
    #[error("size '{0}' cannot be negative")]
    NegativeSize(String),
    #[error("size '{0}' has no number")]
    SizeWithoutNumber(String),
    #[error("size '{0}' has no unit; write one, such as '{0}M'")]
    SizeWithoutUnit(String),
    #[error("unknown unit '{unit}' in size '{text}' (k, M, G, T, P, E, Ki, Mi, Gi, Ti, Pi, Ei, each with or without B)")]
    SizeUnit { unit: String, text: String },
    #[error("size '{0}' is too large")]
    SizeTooLarge(String),
    #[error("duration '{0}' cannot be negative")]
    NegativeDuration(String),
    #[error("duration is empty")]
    EmptyDuration,
    #[error("'{term}' in duration '{text}' has no unit")]
    TermWithoutUnit { term: String, text: String },
    #[error("unknown unit '{unit}' in duration '{text}' (ns, us, ms, s, m, h, d)")]
    DurationUnit { unit: String, text: String },
    #[error("'{unit}' in duration '{text}' has no number in front of it")]
    UnitWithoutNumber { unit: String, text: String },
    #[error("duration '{0}' is too large")]
    DurationTooLarge(String),
}

const BYTE_UNITS: &[(&str, u128)] = &[
    ("", 1),
    ("k", 1_000),
    ("K", 1_000),
    ("M", 1_000_000),
    ("G", 1_000_000_000),
    ("T", 1_000_000_000_000),
    ("P", 1_000_000_000_000_000),
    ("E", 1_000_000_000_000_000_000),
    ("Ki", 1 << 10),
    ("Mi", 1 << 20),
    ("Gi", 1 << 30),
    ("Ti", 1 << 40),
    ("Pi", 1 << 50),
    ("Ei", 1 << 60),
];

const TIME_UNITS: &[(&str, u128)] = &[
    ("ns", 1),
    ("us", 1_000),
    ("\u{b5}s", 1_000),
    ("\u{3bc}s", 1_000),
    ("ms", 1_000_000),
    ("s", 1_000_000_000),
    ("m", 60_000_000_000),
    ("h", 3_600_000_000_000),
    ("d", 86_400_000_000_000),
];

/// A number's whole part, fraction digits and what follows.
fn number(text: &str) -> (&str, &str, &str) {
    let whole_end = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (whole, rest) = text.split_at(whole_end);
    match rest.strip_prefix('.') {
        Some(after) => {
            let end = after
                .find(|c: char| !c.is_ascii_digit())
                .unwrap_or(after.len());
            (whole, &after[..end], &after[end..])
        }
        None => (whole, "", rest),
    }
}

/// `whole.fraction` × `unit`, the fraction rounded to the nearest unit of 1.
fn scaled(whole: &str, fraction: &str, unit: u128) -> Option<u128> {
    let w: u128 = if whole.is_empty() {
        0
    } else {
        whole.parse().ok()?
    };
    let mut total = w.checked_mul(unit)?;
    if !fraction.is_empty() {
        let digits = &fraction[..fraction.len().min(18)];
        let denominator = 10u128.pow(digits.len() as u32);
        let f: u128 = digits.parse().ok()?;
        total = total.checked_add((unit.checked_mul(f)? + denominator / 2) / denominator)?;
    }
    Some(total)
}

impl Size {
    /// Reads a size; `bare` is what a number without a unit counts
    /// (bytes, or `None` where a bare number is refused).
    pub fn parse(text: &str, bare_bytes: bool) -> Result<Self, UnitError> {
        let rest = text.strip_prefix('+').unwrap_or(text);
        if text.starts_with('-') {
            return Err(UnitError::NegativeSize(text.into()));
        }
        let (whole, fraction, unit) = number(rest);
        if whole.is_empty() && fraction.is_empty() {
            return Err(UnitError::SizeWithoutNumber(text.into()));
        }
        if unit.is_empty() && !bare_bytes {
            return Err(UnitError::SizeWithoutUnit(text.into()));
        }
        let unit = unit.strip_suffix('B').unwrap_or(unit);
        let Some(&(_, bytes)) = BYTE_UNITS.iter().find(|(u, _)| *u == unit) else {
            return Err(UnitError::SizeUnit {
                unit: unit.into(),
                text: text.into(),
            });
        };
        scaled(whole, fraction, bytes)
            .and_then(|n| u64::try_from(n).ok())
            .map(Size)
            .ok_or_else(|| UnitError::SizeTooLarge(text.into()))
    }
}

impl Span {
    /// Reads a duration.
    pub fn parse(text: &str) -> Result<Self, UnitError> {
        if text.starts_with('-') {
            return Err(UnitError::NegativeDuration(text.into()));
        }
        let mut rest = text.strip_prefix('+').unwrap_or(text);
        if rest.is_empty() {
            return Err(UnitError::EmptyDuration);
        }
        if rest == "0" {
            return Ok(Span(0));
        }
        let mut total: u128 = 0;
        while !rest.is_empty() {
            let (whole, fraction, after) = number(rest);
            let unit_end = after
                .find(|c: char| c.is_ascii_digit() || c == '.')
                .unwrap_or(after.len());
            let unit = &after[..unit_end];
            if unit.is_empty() {
                return Err(UnitError::TermWithoutUnit {
                    term: rest.into(),
                    text: text.into(),
                });
            }
            let Some(&(_, nanos)) = TIME_UNITS.iter().find(|(u, _)| *u == unit) else {
                return Err(UnitError::DurationUnit {
                    unit: unit.into(),
                    text: text.into(),
                });
            };
            if whole.is_empty() && fraction.is_empty() {
                return Err(UnitError::UnitWithoutNumber {
                    unit: unit.into(),
                    text: text.into(),
                });
            }
            total = scaled(whole, fraction, nanos)
                .and_then(|n| total.checked_add(n))
                .ok_or_else(|| UnitError::DurationTooLarge(text.into()))?;
            rest = &after[unit_end..];
        }
        Ok(Span(total))
    }

    /// Whole seconds, rounded up (a fraction of a second is a second).
    pub fn seconds(self) -> u64 {
        u64::try_from(self.0.div_ceil(1_000_000_000)).unwrap_or(u64::MAX)
    }
}

/// A size whose bare number counts bytes.
pub fn bytes<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Size>, D::Error> {
    match Option::<String>::deserialize(d)? {
        None => Ok(None),
        Some(t) => Size::parse(&t, true).map(Some).map_err(D::Error::custom),
    }
}

/// A size that needs a unit (its older spelling counted megabytes).
pub fn with_unit<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Size>, D::Error> {
    match Option::<String>::deserialize(d)? {
        None => Ok(None),
        Some(t) => Size::parse(&t, false).map(Some).map_err(D::Error::custom),
    }
}

/// A duration.
pub fn span<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Span>, D::Error> {
    match Option::<String>::deserialize(d)? {
        None => Ok(None),
        Some(t) => Span::parse(&t).map(Some).map_err(D::Error::custom),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_read_as_feldera_writes_them() {
        assert_eq!(Size::parse("16G", false), Ok(Size(16_000_000_000)));
        assert_eq!(Size::parse("4Gi", false), Ok(Size(4 << 30)));
        assert_eq!(Size::parse("10MiB", false), Ok(Size(10 << 20)));
        assert_eq!(Size::parse("1.5k", false), Ok(Size(1500)));
        assert_eq!(Size::parse("+2M", false), Ok(Size(2_000_000)));
        assert_eq!(Size::parse("4096", true), Ok(Size(4096)));
        let text = |r: Result<Size, UnitError>| r.unwrap_err().to_string();
        assert!(text(Size::parse("16000", false)).contains("no unit"));
        assert!(Size::parse("-1G", false).is_err());
        assert!(text(Size::parse("3X", false)).contains("unknown unit"));
        assert!(Size::parse("G", false).is_err());
        assert!(text(Size::parse("99999999E", false)).contains("too large"));
    }

    #[test]
    fn durations_read_as_feldera_writes_them() {
        assert_eq!(Span::parse("60s").map(Span::seconds), Ok(60));
        assert_eq!(Span::parse("1h30m").map(Span::seconds), Ok(5400));
        assert_eq!(Span::parse("250ms"), Ok(Span(250_000_000)));
        assert_eq!(Span::parse("1.5s"), Ok(Span(1_500_000_000)));
        assert_eq!(Span::parse("0"), Ok(Span(0)));
        assert_eq!(Span::parse("250ms").map(Span::seconds), Ok(1));
        assert!(Span::parse("10")
            .unwrap_err()
            .to_string()
            .contains("no unit"));
        assert!(Span::parse("5y")
            .unwrap_err()
            .to_string()
            .contains("unknown unit"));
        assert!(Span::parse("").is_err());
    }
}
