//! Feldera's aggregate functions that DataFusion lacks, as DataFusion
//! aggregate UDFs, so that views and ad-hoc queries both have them.
//!
//! * `ARG_MAX(value, compared)` / `ARG_MIN(value, compared)`: the `value`
//!   of a row whose `compared` is the group's largest (smallest). A row
//!   whose `compared` is NULL loses to every row whose `compared` is not,
//!   and is taken when no row's is not (the group's rows all have a NULL
//!   `compared`). Among rows that tie on `compared` (or that all have a
//!   NULL one), `ARG_MAX` takes the largest `value` and `ARG_MIN` the
//!   smallest, NULL counting as the least value, as Feldera picks them.
//! * `COUNTIF(condition)`: the number of rows whose condition is true.
//! * `EVERY` and `SOME` (and `LOGICAL_AND`/`LOGICAL_OR`): DataFusion's
//!   `bool_and` and `bool_or` under Feldera's names.
//!
//! Incrementally these are evaluated like any DataFusion aggregate (the
//! aggregate operator recomputes a touched group from its rows), so they
//! need no retraction.

use std::cmp::Ordering;
use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, AsArray, BooleanArray};
use datafusion::arrow::datatypes::{DataType, Field, FieldRef};
use datafusion::common::{plan_err, Result, ScalarValue};
use datafusion::execution::registry::FunctionRegistry;
use datafusion::logical_expr::function::{AccumulatorArgs, StateFieldsArgs};
use datafusion::logical_expr::utils::format_state_name;
use datafusion::logical_expr::{
    Accumulator, AggregateUDF, AggregateUDFImpl, Signature, TypeSignature, Volatility,
};

/// Feldera's aggregates, to register beside DataFusion's (`registry` holds
/// the `bool_and`/`bool_or` that `EVERY`/`SOME` name).
pub fn functions(registry: &dyn FunctionRegistry) -> Vec<Arc<AggregateUDF>> {
    let mut out = vec![
        Arc::new(AggregateUDF::new_from_impl(ArgExtreme::new(
            Ordering::Greater,
        ))),
        Arc::new(AggregateUDF::new_from_impl(ArgExtreme::new(Ordering::Less))),
        Arc::new(AggregateUDF::new_from_impl(CountIf::new())),
    ];
    for (name, aliases) in [
        ("bool_and", ["every", "logical_and"]),
        ("bool_or", ["some", "logical_or"]),
    ] {
        let f = registry
            .udaf(name)
            .expect("DataFusion's default registry has bool_and and bool_or");
        out.push(Arc::new(f.as_ref().clone().with_aliases(aliases)));
    }
    out
}

/// The user's name of an aggregate, for messages.
fn sql_name(name: &str) -> String {
    name.to_uppercase()
}

/// Refuses a call with the wrong number of arguments, in Feldera's words.
fn check_arity(name: &str, args: &[DataType], wanted: usize) -> Result<()> {
    if args.len() != wanted {
        return plan_err!(
            "Invalid number of arguments to function '{}'. Was expecting {wanted} arguments",
            sql_name(name)
        );
    }
    Ok(())
}

/// `ARG_MAX` (`Ordering::Greater`) or `ARG_MIN` (`Ordering::Less`).
#[derive(Debug, PartialEq, Eq, Hash)]
struct ArgExtreme {
    name: &'static str,
    /// The ordering of `(compared, value)` that replaces the best row.
    wins: Ordering,
    signature: Signature,
}

impl ArgExtreme {
    fn new(wins: Ordering) -> Self {
        Self {
            name: if wins == Ordering::Greater {
                "arg_max"
            } else {
                "arg_min"
            },
            wins,
            signature: Signature::new(TypeSignature::UserDefined, Volatility::Immutable),
        }
    }
}

impl AggregateUDFImpl for ArgExtreme {
    fn name(&self) -> &str {
        self.name
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn coerce_types(&self, args: &[DataType]) -> Result<Vec<DataType>> {
        check_arity(self.name, args, 2)?;
        Ok(args.to_vec())
    }

    fn return_type(&self, args: &[DataType]) -> Result<DataType> {
        check_arity(self.name, args, 2)?;
        Ok(args[0].clone())
    }

    fn accumulator(&self, args: AccumulatorArgs) -> Result<Box<dyn Accumulator>> {
        let types: Vec<DataType> = args
            .expr_fields
            .iter()
            .map(|f| f.data_type().clone())
            .collect();
        Ok(Box::new(ArgExtremeAccumulator {
            wins: self.wins,
            best: None,
            value_type: types[0].clone(),
            compared_type: types[1].clone(),
        }))
    }

    fn state_fields(&self, args: StateFieldsArgs) -> Result<Vec<FieldRef>> {
        Ok(vec![
            Field::new(
                format_state_name(args.name, "value"),
                args.input_fields[0].data_type().clone(),
                true,
            )
            .into(),
            Field::new(
                format_state_name(args.name, "compared"),
                args.input_fields[1].data_type().clone(),
                true,
            )
            .into(),
            Field::new(
                format_state_name(args.name, "seen"),
                DataType::Boolean,
                true,
            )
            .into(),
        ])
    }
}

/// The best `(value, compared)` seen; `compared` is NULL only when every
/// row's was.
#[derive(Debug)]
struct ArgExtremeAccumulator {
    wins: Ordering,
    best: Option<(ScalarValue, ScalarValue)>,
    value_type: DataType,
    compared_type: DataType,
}

impl ArgExtremeAccumulator {
    /// Whether `(value, compared)` beats the best so far.
    fn beats(&self, value: &ScalarValue, compared: &ScalarValue) -> bool {
        let Some((best_value, best_compared)) = &self.best else {
            return true;
        };
        let order = match (compared.is_null(), best_compared.is_null()) {
            // A NULL `compared` loses to any other, either way.
            (true, false) => return false,
            (false, true) => return true,
            (true, true) => Ordering::Equal,
            (false, false) => compared
                .partial_cmp(best_compared)
                .unwrap_or(Ordering::Equal),
        };
        // ScalarValue orders NULL before every value of its type.
        let order = order.then_with(|| value.partial_cmp(best_value).unwrap_or(Ordering::Equal));
        order == self.wins
    }

    /// Folds in rows of `values` and `compared`, those of `seen` only (a
    /// merged state that saw no row has `seen` false or NULL).
    fn update(
        &mut self,
        values: &ArrayRef,
        compared: &ArrayRef,
        seen: Option<&BooleanArray>,
    ) -> Result<()> {
        for i in 0..compared.len() {
            if seen.is_some_and(|s| !s.is_valid(i) || !s.value(i)) {
                continue;
            }
            let c = ScalarValue::try_from_array(compared, i)?;
            let v = ScalarValue::try_from_array(values, i)?;
            if self.beats(&v, &c) {
                self.best = Some((v, c));
            }
        }
        Ok(())
    }
}

impl Accumulator for ArgExtremeAccumulator {
    fn update_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        self.update(&values[0], &values[1], None)
    }

    fn merge_batch(&mut self, states: &[ArrayRef]) -> Result<()> {
        self.update(&states[0], &states[1], Some(states[2].as_boolean()))
    }

    fn state(&mut self) -> Result<Vec<ScalarValue>> {
        Ok(match &self.best {
            Some((v, c)) => vec![v.clone(), c.clone(), ScalarValue::Boolean(Some(true))],
            None => vec![
                ScalarValue::try_from(&self.value_type)?,
                ScalarValue::try_from(&self.compared_type)?,
                ScalarValue::Boolean(Some(false)),
            ],
        })
    }

    fn evaluate(&mut self) -> Result<ScalarValue> {
        match &self.best {
            Some((v, _)) => Ok(v.clone()),
            None => ScalarValue::try_from(&self.value_type),
        }
    }

    fn size(&self) -> usize {
        size_of_val(self)
            + self.best.as_ref().map_or(0, |(v, c)| {
                v.size() + c.size() - 2 * size_of::<ScalarValue>()
            })
    }
}

/// `COUNTIF(condition)`.
#[derive(Debug, PartialEq, Eq, Hash)]
struct CountIf {
    signature: Signature,
}

impl CountIf {
    fn new() -> Self {
        Self {
            signature: Signature::new(TypeSignature::UserDefined, Volatility::Immutable),
        }
    }
}

impl AggregateUDFImpl for CountIf {
    fn name(&self) -> &str {
        "countif"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn coerce_types(&self, args: &[DataType]) -> Result<Vec<DataType>> {
        check_arity("countif", args, 1)?;
        match &args[0] {
            DataType::Boolean | DataType::Null => Ok(vec![DataType::Boolean]),
            other => plan_err!(
                "Cannot apply 'COUNTIF' to arguments of type '{other}': its argument is a BOOLEAN condition"
            ),
        }
    }

    fn return_type(&self, _args: &[DataType]) -> Result<DataType> {
        Ok(DataType::Int64)
    }

    fn is_nullable(&self) -> bool {
        false
    }

    fn accumulator(&self, _args: AccumulatorArgs) -> Result<Box<dyn Accumulator>> {
        Ok(Box::new(CountIfAccumulator(0)))
    }

    fn state_fields(&self, args: StateFieldsArgs) -> Result<Vec<FieldRef>> {
        Ok(vec![Field::new(
            format_state_name(args.name, "count"),
            DataType::Int64,
            false,
        )
        .into()])
    }

    fn default_value(&self, _data_type: &DataType) -> Result<ScalarValue> {
        Ok(ScalarValue::Int64(Some(0)))
    }
}

#[derive(Debug)]
struct CountIfAccumulator(i64);

impl Accumulator for CountIfAccumulator {
    fn update_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        let conditions: &BooleanArray = values[0].as_boolean();
        self.0 += conditions.iter().filter(|c| *c == Some(true)).count() as i64;
        Ok(())
    }

    fn merge_batch(&mut self, states: &[ArrayRef]) -> Result<()> {
        let counts = states[0].as_primitive::<datafusion::arrow::datatypes::Int64Type>();
        self.0 += counts.iter().flatten().sum::<i64>();
        Ok(())
    }

    fn state(&mut self) -> Result<Vec<ScalarValue>> {
        Ok(vec![ScalarValue::Int64(Some(self.0))])
    }

    fn evaluate(&mut self) -> Result<ScalarValue> {
        Ok(ScalarValue::Int64(Some(self.0)))
    }

    fn size(&self) -> usize {
        size_of_val(self)
    }
}
