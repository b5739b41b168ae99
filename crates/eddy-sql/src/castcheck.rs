//! Casts that can never succeed are refused when the program is planned,
//! not at the first row (casts.md): a value cast to a type it has no
//! conversion to (`CAST(m AS user_def)` of a MAP, an INT to a ROW, a MAP
//! whose values cannot become the other map's), a scalar cast to an ARRAY
//! (which Arrow would wrap into a one-element array; Feldera refuses it),
//! and a `SAFE_CAST` between ROW types, which Feldera refuses because a
//! field's failure cannot make the whole ROW NULL. The texts are Feldera's:
//! `Cast function cannot convert value of type MAP<VARCHAR, INT> to type
//! ROW(INT, VARCHAR)`.
//!
//! An analyzer rule run after type coercion, first of Eddy's, so that it
//! sees every cast as written or inserted before Eddy's rules turn some of
//! them into functions. A cast Eddy makes itself is accepted: any cast
//! that involves a VARIANT, ROWs by position, arrays and maps element by
//! element, and Feldera's casts of `timecasts` and of intervals.

use datafusion::arrow::compute::can_cast_types;
use datafusion::arrow::datatypes::DataType;
use datafusion::common::config::ConfigOptions;
use datafusion::common::{plan_err, Result};
use datafusion::logical_expr::LogicalPlan;
use datafusion::optimizer::AnalyzerRule;
use eddy_io::variant::holds_variant;

/// The analyzer rule.
#[derive(Debug, Default)]
pub struct RefuseImpossibleCasts;

impl AnalyzerRule for RefuseImpossibleCasts {
    fn analyze(&self, plan: LogicalPlan, _: &ConfigOptions) -> Result<LogicalPlan> {
        crate::rowcast::rewrite_casts_of_kind(plan, |_, from, to, safe| {
            match refusal(from, to, safe) {
                Some(why) => plan_err!("{why}"),
                None => Ok(None),
            }
        })
    }

    fn name(&self) -> &str {
        "eddy_refuse_impossible_casts"
    }
}

/// Why a cast from `from` to `to` can never succeed, in Feldera's words;
/// `None` where it can.
pub fn refusal(from: &DataType, to: &DataType, safe: bool) -> Option<String> {
    if safe && from != to && is_row(from) && is_row(to) && !holds_variant(from) {
        return Some(format!(
            "SAFE_CAST cannot be used to convert {} to {}",
            feldera_type(from),
            feldera_type(to)
        ));
    }
    match castable(from, to) {
        Castable::Yes => None,
        Castable::ScalarToArray => Some(format!(
            "Cast cannot be used to convert {} to {}",
            feldera_type(from),
            feldera_type(to)
        )),
        Castable::No => Some(format!(
            "Cast function cannot convert value of type {} to type {}",
            feldera_type(from),
            feldera_type(to)
        )),
    }
}

enum Castable {
    Yes,
    ScalarToArray,
    No,
}

fn castable(from: &DataType, to: &DataType) -> Castable {
    use DataType as T;
    if from == to || from == &T::Null || holds_variant(from) || holds_variant(to) {
        return Castable::Yes;
    }
    let all = |pairs: Vec<(&DataType, &DataType)>| match pairs
        .into_iter()
        .all(|(f, t)| matches!(castable(f, t), Castable::Yes))
    {
        true => Castable::Yes,
        false => Castable::No,
    };
    match (from, to) {
        (T::Struct(f), T::Struct(t)) if f.len() == t.len() => all(f
            .iter()
            .zip(t.iter())
            .map(|(f, t)| (f.data_type(), t.data_type()))
            .collect()),
        (T::Struct(_), T::Struct(_)) => Castable::No,
        (
            T::List(f) | T::LargeList(f) | T::FixedSizeList(f, _),
            T::List(t) | T::LargeList(t) | T::FixedSizeList(t, _),
        ) => all(vec![(f.data_type(), t.data_type())]),
        (T::Map(f, _), T::Map(t, _)) => {
            match (entry_types(f.data_type()), entry_types(t.data_type())) {
                (Some((fk, fv)), Some((tk, tv))) => all(vec![(fk, tk), (fv, tv)]),
                _ => Castable::No,
            }
        }
        (f, T::List(_) | T::LargeList(_) | T::FixedSizeList(..)) if !is_nested(f) => {
            Castable::ScalarToArray
        }
        (_, T::Struct(_) | T::Map(..)) | (T::Struct(_) | T::Map(..), _) => Castable::No,
        (f, t) if crate::uuid::casts(f, t) => Castable::Yes,
        // Feldera's own casts (`timecasts`, `interval`).
        (T::Time32(_) | T::Time64(_), T::Timestamp(..)) => Castable::Yes,
        (T::Decimal128(..) | T::Decimal256(..), T::Boolean) => Castable::Yes,
        (T::Interval(_), t) if t.is_numeric() => Castable::Yes,
        (f, t) if can_cast_types(f, t) => Castable::Yes,
        _ => Castable::No,
    }
}

fn entry_types(entries: &DataType) -> Option<(&DataType, &DataType)> {
    match entries {
        DataType::Struct(kv) if kv.len() == 2 => Some((kv[0].data_type(), kv[1].data_type())),
        _ => None,
    }
}

fn is_row(t: &DataType) -> bool {
    matches!(t, DataType::Struct(_))
}

fn is_nested(t: &DataType) -> bool {
    matches!(
        t,
        DataType::Struct(_)
            | DataType::Map(..)
            | DataType::List(_)
            | DataType::LargeList(_)
            | DataType::FixedSizeList(..)
    )
}

/// A type as Feldera's messages write it: `INT`, `VARCHAR ARRAY`,
/// `ROW(INT, VARCHAR)`, `MAP<VARCHAR, INT>`, `DECIMAL(6, 2)`.
pub fn feldera_type(t: &DataType) -> String {
    use DataType as T;
    match t {
        T::Int32 => "INT".into(),
        T::Struct(fields) => format!(
            "ROW({})",
            fields
                .iter()
                .map(|f| feldera_type(f.data_type()))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        T::List(f) | T::LargeList(f) | T::FixedSizeList(f, _) => {
            format!("{} ARRAY", feldera_type(f.data_type()))
        }
        T::Map(f, _) => match entry_types(f.data_type()) {
            Some((k, v)) => format!("MAP<{}, {}>", feldera_type(k), feldera_type(v)),
            None => "MAP".into(),
        },
        T::Decimal128(p, s) | T::Decimal256(p, s) => format!("DECIMAL({p}, {s})"),
        T::Timestamp(_, Some(_)) => "TIMESTAMP WITH TIME ZONE".into(),
        t if eddy_io::uuid::is_uuid(t) => "UUID".into(),
        other => crate::error::sql_type_name(&other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::datatypes::{Field, Fields};
    use std::sync::Arc;

    fn row(types: &[DataType]) -> DataType {
        DataType::Struct(Fields::from(
            types
                .iter()
                .enumerate()
                .map(|(i, t)| Field::new(format!("f{i}"), t.clone(), true))
                .collect::<Vec<_>>(),
        ))
    }

    fn array(t: DataType) -> DataType {
        DataType::List(Arc::new(Field::new_list_field(t, true)))
    }

    #[test]
    fn impossible_casts_are_named_in_feldera_s_words() {
        let r = row(&[DataType::Int32, DataType::Utf8]);
        assert_eq!(
            refusal(&DataType::Int32, &r, true).unwrap(),
            "Cast function cannot convert value of type INT to type ROW(INT, VARCHAR)"
        );
        assert_eq!(
            refusal(&DataType::Utf8, &array(DataType::Utf8), false).unwrap(),
            "Cast cannot be used to convert VARCHAR to VARCHAR ARRAY"
        );
        assert_eq!(
            refusal(&r, &row(&[DataType::Int32, DataType::Float64]), true).unwrap(),
            "SAFE_CAST cannot be used to convert ROW(INT, VARCHAR) to ROW(INT, DOUBLE)"
        );
        assert!(refusal(
            &array(DataType::Int32),
            &array(array(DataType::Int32)),
            false
        )
        .is_some());
    }

    #[test]
    fn possible_casts_pass() {
        let r = row(&[DataType::Int32, DataType::Utf8]);
        assert!(refusal(&r, &row(&[DataType::Int64, DataType::Utf8]), false).is_none());
        assert!(refusal(&array(DataType::Utf8), &array(DataType::Int32), true).is_none());
        assert!(refusal(&DataType::Utf8, &DataType::Int32, false).is_none());
        assert!(refusal(&DataType::LargeBinary, &r, false).is_none());
        assert!(refusal(&DataType::Null, &r, false).is_none());
    }
}
