//! SQL-bodied functions: `CREATE FUNCTION f(x T, …) RETURNS R AS <expr>`.
//!
//! A function is inlined where it is called, before DataFusion plans the
//! query: the call `f(a, …)` becomes `CAST(<expr with x := CAST(a AS T)>
//! AS R)`. A body may call functions defined before it (they are inlined
//! into it when it is defined), so inlining always ends. A function without
//! a body (Feldera's user-defined functions written in Rust) is refused,
//! but for `jsonstring_as_<type>`, whose body Feldera's compiler writes
//! and Eddy too.
//!
//! Feldera's SQL also has functions that DataFusion names differently or
//! lacks; they are rewritten the same way, into DataFusion's spelling
//! ([`builtin`]): `MOD(a, b)`, `HOUR(ts)` and the other date parts,
//! `FORMAT_TIMESTAMP(format, ts)`, `SPLIT(s [, sep])` (an array, indexed
//! from 1), `TIMESTAMP_TRUNC(ts, unit)`, `TIMESTAMPDIFF`/`TIMESTAMPADD`
//! and the other date functions, array, math and string spellings, and
//! the forms `s RLIKE p` and `FLOOR`/`CEIL(ts TO unit)` ([`builtin_form`]).
//! A name that PostgreSQL also defines with another meaning has Feldera's
//! under [`Rules::Feldera`] and PostgreSQL's (DataFusion's) under
//! [`Rules::Postgres`] ([`feldera_meaning`], docs/sql.md). A program's own
//! function of the same name wins.

use std::collections::HashMap;
use std::ops::ControlFlow;

use datafusion::sql::sqlparser::ast::{
    visit_expressions_mut, CastKind, CharacterLength, CreateFunction, CreateFunctionBody, DataType,
    Expr, FunctionArg, FunctionArgExpr, FunctionArguments, FunctionReturnType, VisitMut,
};

use crate::dialect::generated_expr;
use crate::error::{SqlError, SqlResult};
use crate::program::normalize_ident;
use crate::session::Rules;

/// One SQL-bodied function.
#[derive(Debug, Clone)]
pub struct SqlFunction {
    /// Normalized name.
    pub name: String,
    /// Parameters: normalized names and types.
    pub params: Vec<(String, DataType)>,
    /// The result type.
    pub returns: DataType,
    /// The body, with earlier functions already inlined.
    pub body: Expr,
}

/// Feldera's functions whose body the compiler writes: a bodiless
/// `CREATE FUNCTION jsonstring_as_<type>(s VARCHAR) RETURNS <type>` parses
/// JSON text straight into the user-defined type (json.md).
const JSONSTRING_AS_PREFIX: &str = "jsonstring_as_";

/// The body of `jsonstring_as_<type>`: the JSON text of its one parameter
/// cast to the result type, a field taking the key of its name in any case
/// (see [`crate::variant`]).
fn jsonstring_as_body(name: &str, cf: &CreateFunction) -> SqlResult<Expr> {
    let params: Vec<_> = cf.args.iter().flatten().collect();
    let (Some(FunctionReturnType::DataType(returns)), [param]) = (&cf.return_type, &params[..])
    else {
        return Err(SqlError::new(format!(
            "function '{name}' takes one string and RETURNS a user-defined type"
        )));
    };
    let Some(p) = &param.name else {
        return Err(SqlError::new(format!(
            "function '{name}': its parameter needs a name"
        )));
    };
    let text = format!(
        "{}({p}, CAST(NULL AS {returns}))",
        crate::variant::JSONSTRING_AS
    );
    datafusion::sql::sqlparser::parser::Parser::new(&crate::dialect::EddyDialect)
        .try_with_sql(&text)
        .and_then(|mut parser| parser.parse_expr())
        .map_err(|e| SqlError::new(format!("function '{name}': {e}")))
}

/// The functions of a program, by name.
#[derive(Debug, Clone, Default)]
pub struct Functions {
    by_name: HashMap<String, SqlFunction>,
}

fn cast(expr: Expr, data_type: DataType) -> Expr {
    Expr::Cast {
        kind: CastKind::Cast,
        expr: Box::new(Expr::Nested(Box::new(expr))),
        data_type,
        format: None,
        array: false,
    }
}

impl Functions {
    /// Adds a `CREATE FUNCTION` statement of a program planned with `rules`.
    pub fn add(&mut self, cf: &CreateFunction, rules: Rules) -> SqlResult<()> {
        let name = cf
            .name
            .0
            .last()
            .and_then(|p| p.as_ident())
            .map(normalize_ident)
            .unwrap_or_else(|| cf.name.to_string());
        if self.by_name.contains_key(&name) && !cf.or_replace {
            return Err(SqlError::new(format!(
                "function '{name}' is already defined"
            )));
        }
        let synthesized;
        let body = match &cf.function_body {
            Some(CreateFunctionBody::AsBeforeOptions { body, .. }) => body,
            None if name.starts_with(JSONSTRING_AS_PREFIX) => {
                synthesized = jsonstring_as_body(&name, cf)?;
                &synthesized
            }
            _ => {
                return Err(SqlError::new(format!(
                    "function '{name}' has no SQL body: Eddy runs functions written in SQL \
                 (CREATE FUNCTION {name}(...) RETURNS type AS expression), not user-defined \
                 functions in Rust"
                )))
            }
        };
        let Some(FunctionReturnType::DataType(returns)) = &cf.return_type else {
            return Err(SqlError::new(format!(
                "function '{name}' needs RETURNS type"
            )));
        };
        let mut params = Vec::new();
        for a in cf.args.iter().flatten() {
            let Some(p) = &a.name else {
                return Err(SqlError::new(format!(
                    "function '{name}': every parameter needs a name"
                )));
            };
            params.push((normalize_ident(p), a.data_type.clone()));
        }
        let mut body = body.clone();
        self.inline(&mut body, rules)?;
        self.by_name.insert(
            name.clone(),
            SqlFunction {
                name,
                params,
                returns: returns.clone(),
                body,
            },
        );
        Ok(())
    }

    /// Inlines every call of a known function in `node`, and rewrites
    /// Feldera's builtin functions into DataFusion's spelling (with
    /// Feldera's meaning under `rules` [`Rules::Feldera`]).
    pub fn inline<V: VisitMut>(&self, node: &mut V, rules: Rules) -> SqlResult<()> {
        let mut error = None;
        let _ = visit_expressions_mut(node, |e: &mut Expr| {
            dot_as_subscript(e);
            if let Some(result) = builtin_form(e) {
                return match result {
                    Ok(new) => {
                        *e = new;
                        ControlFlow::Continue(())
                    }
                    Err(err) => {
                        error = Some(err);
                        ControlFlow::Break(())
                    }
                };
            }
            let Expr::Function(call) = e else {
                return ControlFlow::Continue(());
            };
            let Some(name) = call.name.0.last().and_then(|p| p.as_ident()) else {
                return ControlFlow::Continue(());
            };
            let result = match self.by_name.get(&normalize_ident(name)) {
                Some(f) => expand(f, &call.args),
                None => match builtin(&normalize_ident(name), &call.args, rules) {
                    Some(r) => r,
                    None => return ControlFlow::Continue(()),
                },
            };
            match result {
                Ok(new) => {
                    *e = new;
                    ControlFlow::Continue(())
                }
                Err(err) => {
                    error = Some(err);
                    ControlFlow::Break(())
                }
            }
        });
        error.map_or(Ok(()), Err)
    }
}

/// A field of a ROW that an expression yields, `(expr).f` or `a[1].f`,
/// becomes `(expr)['f']`, which DataFusion plans (it refuses a dot after
/// anything but a column's name). A dot right after a name is left alone:
/// it may qualify a column by its table.
fn dot_as_subscript(e: &mut Expr) {
    use datafusion::sql::sqlparser::ast::{AccessExpr, Subscript, Value};
    let Expr::CompoundFieldAccess { root, access_chain } = e else {
        return;
    };
    let mut after_name = matches!(
        root.as_ref(),
        Expr::Identifier(_) | Expr::CompoundIdentifier(_)
    );
    for access in access_chain.iter_mut() {
        if let AccessExpr::Dot(Expr::Identifier(field)) = access {
            if !after_name {
                let name = match field.quote_style {
                    Some(_) => field.value.clone(),
                    None => field.value.to_lowercase(),
                };
                *access = AccessExpr::Subscript(Subscript::Index {
                    index: Expr::value(Value::SingleQuotedString(name)),
                });
            }
        } else {
            after_name = false;
        }
    }
}

/// The name of Eddy's `NOW()`: the time the current step started (see
/// [`now`]). DataFusion's own `now()` is the planning time, folded into a
/// constant.
pub const NOW: &str = "eddy_now";

/// Eddy's `NOW()`. Lowering turns the conditions that bound a time by it
/// into temporal filters and refuses it elsewhere, so it is never
/// evaluated as a plain function in a view; evaluated, it is the wall clock.
pub fn now() -> std::sync::Arc<datafusion::logical_expr::ScalarUDF> {
    std::sync::Arc::new(datafusion::logical_expr::ScalarUDF::new_from_impl(Now {
        signature: datafusion::logical_expr::Signature::nullary(
            datafusion::logical_expr::Volatility::Volatile,
        ),
    }))
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct Now {
    signature: datafusion::logical_expr::Signature,
}

impl datafusion::logical_expr::ScalarUDFImpl for Now {
    fn name(&self) -> &str {
        NOW
    }

    fn signature(&self) -> &datafusion::logical_expr::Signature {
        &self.signature
    }

    fn return_type(
        &self,
        _: &[datafusion::arrow::datatypes::DataType],
    ) -> datafusion::common::Result<datafusion::arrow::datatypes::DataType> {
        Ok(datafusion::arrow::datatypes::DataType::Timestamp(
            datafusion::arrow::datatypes::TimeUnit::Nanosecond,
            None,
        ))
    }

    fn invoke_with_args(
        &self,
        _: datafusion::logical_expr::ScalarFunctionArgs,
    ) -> datafusion::common::Result<datafusion::logical_expr::ColumnarValue> {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as i64)
            .unwrap_or(0);
        Ok(datafusion::logical_expr::ColumnarValue::Scalar(
            datafusion::common::ScalarValue::TimestampNanosecond(Some(nanos), None),
        ))
    }
}

/// The plain arguments of a call, as SQL text.
fn argument_texts(args: &FunctionArguments) -> Option<Vec<String>> {
    match args {
        FunctionArguments::None => Some(vec![]),
        FunctionArguments::List(list) if list.duplicate_treatment.is_none() => list
            .args
            .iter()
            .map(|a| match a {
                FunctionArg::Unnamed(FunctionArgExpr::Expr(e)) => Some(format!("({e})")),
                _ => None,
            })
            .collect(),
        _ => None,
    }
}

/// Feldera's spelling of a function, rewritten into DataFusion's; `None`
/// when `name` is not one of them (or the call does not have its shape,
/// which DataFusion then reports).
pub fn builtin(name: &str, args: &FunctionArguments, rules: Rules) -> Option<SqlResult<Expr>> {
    let a = argument_texts(args)?;
    if rules == Rules::Feldera {
        if let Some(text) = feldera_meaning(name, &a) {
            return Some(generated_expr(&text, &format!("{name}()")));
        }
    }
    let part = |p: &str| match a.as_slice() {
        [t] => Some(format!("CAST(date_part('{p}', {t}) AS BIGINT)")),
        _ => None,
    };
    let text = match (name, a.as_slice()) {
        ("mod", [x, y]) => format!("({x} % {y})"),
        ("now" | "current_timestamp", []) => format!("{NOW}()"),
        ("hour" | "minute" | "second" | "year" | "month" | "quarter" | "week", _) => part(name)?,
        ("dayofmonth", _) => part("day")?,
        ("dayofyear", _) => part("doy")?,
        ("epoch", _) => part("epoch")?,
        ("millisecond", [t]) => {
            format!("CAST(date_part('millisecond', {t}) AS BIGINT) % 1000")
        }
        // Feldera counts Sunday as 1; date_part's dow counts it as 0.
        ("dayofweek", [t]) => format!("(CAST(date_part('dow', {t}) AS BIGINT) + 1)"),
        ("format_timestamp", [format, t]) => format!("to_char({t}, {format})"),
        ("split", [s]) => format!("string_to_array({s}, ',')"),
        ("split", [s, sep]) => format!("string_to_array({s}, {sep})"),
        ("timestamp_trunc", [t, unit]) => truncate(t, unit)?,
        ("time_trunc", [t, unit]) => format!("date_trunc('{}', {t})", unit_word(unit)?),
        // Feldera's DATE_TRUNC(date, UNIT); DataFusion's own form takes
        // the unit first, as a string, and is left alone.
        ("date_trunc", [d, unit]) if !d.starts_with("('") => {
            format!("CAST({} AS DATE)", truncate(d, unit)?)
        }
        ("timestampdiff" | "datediff", [unit, l, r]) => difference(&unit_word(unit)?, l, r)?,
        ("timestampadd" | "dateadd", [unit, n, x]) => add(&unit_word(unit)?, n, x)?,
        ("date_add", [d, i]) => format!("({d} + {i})"),
        ("date_sub", [d, i]) => format!("({d} - {i})"),
        ("format_date" | "format_time", [format, t]) => format!("to_char({t}, {format})"),
        ("parse_date", [format, s]) => format!("to_date({s}, {format})"),
        ("parse_time", [format, s]) => format!("to_time({s}, {format})"),
        ("parse_timestamp", [format, s]) => format!("to_timestamp({s}, {format})"),
        ("array_size", [a]) => format!("CAST(array_length({a}) AS INT)"),
        // Every match, as PostgreSQL and Feldera (DataFusion's removes one).
        ("array_remove", [a, e]) => format!("array_remove_all({a}, {e})"),
        ("sort_array", [a]) => format!("array_sort({a})"),
        ("sort_array", [a, asc]) => match asc.to_lowercase().as_str() {
            "(true)" => format!("array_sort({a})"),
            "(false)" => format!("array_sort({a}, 'DESC', 'NULLS LAST')"),
            _ => return None,
        },
        ("map_contains_key", [m, k]) => format!("array_has(map_keys({m}), {k})"),
        ("sign", [x]) => {
            format!("(CASE WHEN {x} > 0 THEN 1 WHEN {x} < 0 THEN -1 WHEN {x} = 0 THEN 0 END)")
        }
        ("truncate", [x]) => format!("trunc({x})"),
        ("truncate", [x, d]) => format!("trunc({x}, {d})"),
        ("is_nan", [x]) => format!("isnan({x})"),
        ("is_inf", [x]) => format!("(abs({x}) = CAST('inf' AS DOUBLE))"),
        ("csc", [x]) => format!("(1 / sin({x}))"),
        ("sec", [x]) => format!("(1 / cos({x}))"),
        ("csch", [x]) => format!("(1 / sinh({x}))"),
        ("sech", [x]) => format!("(1 / cosh({x}))"),
        ("coth", [x]) => format!("(1 / tanh({x}))"),
        ("len", [s]) => format!("character_length({s})"),
        ("rlike", [s, p]) => format!("regexp_like({s}, {p})"),
        ("greatest_ignore_nulls", _) => format!("greatest({})", a.join(", ")),
        ("least_ignore_nulls", _) => format!("least({})", a.join(", ")),
        ("if", [c, x, y]) => format!("(CASE WHEN {c} THEN {x} ELSE {y} END)"),
        // `DATE_PART(unit, x)` is `EXTRACT(unit FROM x)` (datetime.md);
        // DataFusion's own form takes the unit as a string.
        ("date_part", [unit, t]) if !unit.starts_with("('") => {
            format!("EXTRACT({} FROM {t})", unit_word(unit)?)
        }
        ("finite_or_null", [x]) => {
            format!(
                "(CASE WHEN isnan({x}) OR abs({x}) = CAST('inf' AS DOUBLE) THEN NULL ELSE {x} END)"
            )
        }
        ("div_null", [x, y]) => format!("(CASE WHEN {y} = 0 THEN NULL ELSE {x} / {y} END)"),
        // The array constructor `ARRAY(e, …)` (array.md), and
        // `a[SAFE_OFFSET(i)]`, counted from 0 (an index out of bounds is
        // NULL, as every index).
        ("array", _) => format!("make_array({})", a.join(", ")),
        ("safe_offset", [i]) => format!("({i} + 1)"),
        ("grouping_id", _) => format!("grouping({})", a.join(", ")),
        ("sequence", [from, to]) => format!("generate_series({from}, {to})"),
        _ => return None,
    };
    Some(generated_expr(&text, &format!("{name}()")))
}

/// The functions that PostgreSQL (and DataFusion) define with another
/// meaning than Feldera's reference, in Feldera's meaning: `LOG(x)` is the
/// natural logarithm and `LOG(x, base)` takes the base second (float.md);
/// `GREATEST`, `LEAST` (comparisons.md) and `CONCAT` are NULL when any
/// argument is; `REGEXP_REPLACE` replaces every match (string.md);
/// `ARRAY_POSITION` is 0 when the element is absent, `ARRAY_PREPEND`
/// takes the array first, and `ARRAY_EXCEPT`, `ARRAY_UNION` and
/// `ARRAY_INTERSECT` are sorted (array.md). Each result is spelled so that
/// rewriting it again changes nothing.
fn feldera_meaning(name: &str, a: &[String]) -> Option<String> {
    let any_null = || {
        a.iter()
            .map(|x| format!("{x} IS NULL"))
            .collect::<Vec<_>>()
            .join(" OR ")
    };
    Some(match (name, a) {
        ("log", [x]) => format!("ln({x})"),
        ("log", [x, base]) => format!("(ln({x}) / ln({base}))"),
        ("greatest" | "least" | "concat", [_, ..]) => format!(
            "(CASE WHEN {} THEN NULL ELSE {name}({}) END)",
            any_null(),
            a.join(", ")
        ),
        ("regexp_replace", [s, p]) => format!("regexp_replace({s}, {p}, '', 'g')"),
        ("regexp_replace", [s, p, r]) => format!("regexp_replace({s}, {p}, {r}, 'g')"),
        ("array_position", [arr, e]) => format!(
            "(CASE WHEN {arr} IS NULL THEN NULL \
             ELSE CAST(coalesce(array_position({arr}, {e}), 0) AS BIGINT) END)"
        ),
        ("array_prepend", [arr, e]) => format!("array_push_front({e}, {arr})"),
        // Sets of elements, sorted ascending (NULL first) as array.md
        // says; called by DataFusion's other name so that the result
        // reads the same when rewritten again.
        ("array_except" | "array_union" | "array_intersect", [l, r]) => {
            let list = name.replacen("array_", "list_", 1);
            format!("array_sort({list}({l}, {r}), 'ASC', 'NULLS FIRST')")
        }
        _ => return None,
    })
}

/// Feldera's names that [`builtin`] and SQL's own forms (`SUBSTRING(…)`,
/// `TRIM(…)`, `POSITION(… IN …)`) turn into calls of a function of
/// another name, paired with that name: messages about the call name it
/// as the user wrote it (see [`crate::error::respelled`]).
pub const RESPELLED: &[(&str, &str)] = &[
    ("len", "character_length"),
    ("rlike", "regexp_like"),
    ("split", "string_to_array"),
    ("sort_array", "array_sort"),
    ("array_remove", "array_remove_all"),
    ("map_contains_key", "map_keys"),
    ("array_size", "array_length"),
    ("truncate", "trunc"),
    ("is_nan", "isnan"),
    ("substring", "substr"),
    ("trim", "btrim"),
    ("trim", "ltrim"),
    ("trim", "rtrim"),
    ("position", "strpos"),
    ("format_date", "to_char"),
    ("format_timestamp", "to_char"),
    ("parse_date", "to_date"),
    ("parse_timestamp", "to_timestamp"),
    // HOP's panes are tumbling windows of its slide (see `tvf`).
    ("hop", "tumble"),
    ("array", "make_array"),
    ("array_except", "list_except"),
    ("array_union", "list_union"),
    ("array_intersect", "list_intersect"),
    ("sequence", "generate_series"),
    ("grouping_id", "grouping"),
];

/// A time unit written as a word (`DAY`, `SQL_TSI_DAY`, `'day'`), lowercased.
fn unit_word(text: &str) -> Option<String> {
    let unit = text
        .trim_matches(|c| c == '(' || c == ')' || c == '\'' || c == '"')
        .to_lowercase();
    let unit = unit.strip_prefix("sql_tsi_").unwrap_or(&unit).to_string();
    (!unit.is_empty() && unit.chars().all(|c| c.is_ascii_alphabetic())).then_some(unit)
}

/// `x` truncated to `unit`; weeks start on Sunday, as in Feldera.
fn truncate(x: &str, unit: &str) -> Option<String> {
    Some(match unit_word(unit)?.as_str() {
        "week" => format!("(date_trunc('week', {x} + INTERVAL '1' DAY) - INTERVAL '1' DAY)"),
        u => format!("date_trunc('{u}', {x})"),
    })
}

/// Nanoseconds in one unit below a month.
fn unit_nanos(unit: &str) -> Option<i64> {
    Some(match unit {
        "microsecond" => 1_000,
        "millisecond" => 1_000_000,
        "second" => 1_000_000_000,
        "minute" => 60_000_000_000,
        "hour" => 3_600_000_000_000,
        "day" => 86_400_000_000_000,
        "week" => 604_800_000_000_000,
        _ => return None,
    })
}

/// `TIMESTAMPDIFF(unit, l, r)`: `r − l` in whole units, truncated toward
/// zero; months, quarters and years count whole calendar months.
fn difference(unit: &str, l: &str, r: &str) -> Option<String> {
    let ns = |x: &str| format!("{}({x})", crate::nanos::NAME);
    if let Some(n) = unit_nanos(unit) {
        return Some(format!("(({} - {}) / {n})", ns(r), ns(l)));
    }
    let per = match unit {
        "month" => 1,
        "quarter" => 3,
        "year" => 12,
        _ => return None,
    };
    let months = |x: &str| {
        format!(
            "(CAST(date_part('year', {x}) AS BIGINT) * 12 + CAST(date_part('month', {x}) AS BIGINT))"
        )
    };
    // Time since the start of the month: a month counts once r's reaches l's.
    let into = |x: &str| {
        format!(
            "({} - {})",
            ns(x),
            ns(&format!("date_trunc('month', CAST({x} AS TIMESTAMP))"))
        )
    };
    let m = format!("({} - {})", months(r), months(l));
    Some(format!(
        "(({m} - CASE WHEN {m} > 0 AND {ir} < {il} THEN 1 WHEN {m} < 0 AND {ir} > {il} THEN -1 \
         ELSE 0 END) / {per})",
        ir = into(r),
        il = into(l)
    ))
}

/// `TIMESTAMPADD(unit, n, x)`: `x` moved by `n` units (below a day, as a
/// timestamp).
fn add(unit: &str, n: &str, x: &str) -> Option<String> {
    let interval =
        |count: String, u: &str| format!("CAST(CAST({count} AS VARCHAR) || ' {u}' AS INTERVAL)");
    Some(match unit {
        "quarter" => format!("({x} + {})", interval(format!("({n} * 3)"), "month")),
        "day" | "week" | "month" | "year" => format!("({x} + {})", interval(n.to_string(), unit)),
        u if unit_nanos(u).is_some() => {
            format!("(CAST({x} AS TIMESTAMP) + {})", interval(n.to_string(), u))
        }
        _ => return None,
    })
}

/// Feldera's expression forms that are no function calls: `s RLIKE p`
/// and `FLOOR`/`CEIL(ts TO unit)`, rewritten into DataFusion's spelling.
fn builtin_form(e: &Expr) -> Option<SqlResult<Expr>> {
    use datafusion::sql::sqlparser::ast::{CeilFloorKind, DateTimeField};
    let text = match e {
        Expr::RLike {
            negated,
            expr,
            pattern,
            ..
        } => format!(
            "({}regexp_like(({expr}), ({pattern})))",
            if *negated { "NOT " } else { "" }
        ),
        Expr::Between {
            expr,
            negated,
            low,
            high,
        } => {
            let Expr::Function(mark) = low.as_ref() else {
                return None;
            };
            if !mark
                .name
                .to_string()
                .eq_ignore_ascii_case(crate::dialect::SYMMETRIC_MARKER)
            {
                return None;
            }
            let FunctionArguments::List(list) = &mark.args else {
                return None;
            };
            let [FunctionArg::Unnamed(FunctionArgExpr::Expr(low))] = list.args.as_slice() else {
                return None;
            };
            // Either order of the bounds (comparisons.md).
            format!(
                "({}(({expr}) BETWEEN ({low}) AND ({high}) OR ({expr}) BETWEEN ({high}) AND ({low})))",
                if *negated { "NOT " } else { "" }
            )
        }
        // `FLOOR(x)` of a number parses with no unit: DataFusion's own.
        Expr::Floor {
            expr,
            field: CeilFloorKind::DateTimeField(unit),
        } if *unit != DateTimeField::NoDateTime => {
            truncate(&format!("({expr})"), &unit.to_string())?
        }
        Expr::Ceil {
            expr,
            field: CeilFloorKind::DateTimeField(unit),
        } if *unit != DateTimeField::NoDateTime => {
            let x = format!("({expr})");
            let floor = truncate(&x, &unit.to_string())?;
            let unit = unit_word(&unit.to_string())?;
            format!("(CASE WHEN {floor} = {x} THEN {x} ELSE {floor} + INTERVAL '1' {unit} END)")
        }
        Expr::Function(call)
            if call
                .name
                .to_string()
                .eq_ignore_ascii_case(crate::dialect::INTERVAL_QUALIFIED) =>
        {
            return Some(interval_qualified(&call.args));
        }
        Expr::Cast {
            kind: CastKind::Cast | CastKind::DoubleColon,
            expr,
            data_type,
            format: None,
            ..
        } => {
            // `BINARY(n)` pads with zero bytes to n and cuts at n;
            // `BINARY` alone is `BINARY(1)`, as for `CHAR`.
            if let DataType::Binary(n) = data_type {
                let text = format!(
                    "{}(CAST(({expr}) AS VARBINARY), {})",
                    crate::binary::WIDTH,
                    n.unwrap_or(1)
                );
                return Some(generated_expr(&text, &e.to_string()));
            }
            // `CHAR` alone is `CHAR(1)`, as SQL defines it.
            let one = CharacterLength::IntegerLength {
                length: 1,
                unit: None,
            };
            let (fixed, length) = match data_type {
                DataType::Char(Some(l)) | DataType::Character(Some(l)) => (true, l),
                DataType::Char(None) | DataType::Character(None) => (true, &one),
                DataType::Varchar(Some(l))
                | DataType::CharVarying(Some(l))
                | DataType::CharacterVarying(Some(l)) => (false, l),
                _ => return None,
            };
            let CharacterLength::IntegerLength { length, .. } = length else {
                return None;
            };
            // CHAR(n) pads with spaces to n characters and VARCHAR(n) cuts
            // at n; both cut a longer value.
            let text = format!("CAST(({expr}) AS VARCHAR)");
            if fixed {
                format!("rpad({text}, {length})")
            } else {
                format!("substr({text}, 1, {length})")
            }
        }
        _ => return None,
    };
    Some(generated_expr(&text, &e.to_string()))
}

/// `(a - b) UNIT [TO UNIT]` (see [`crate::dialect`]): the time from `b`
/// to `a` as an interval of that type (see [`crate::interval`]): the whole
/// months between them for `YEAR`, `MONTH` and `YEAR TO MONTH`, else the
/// exact time; the type's last unit truncates only its text and its
/// casts to numbers, as in Feldera.
fn interval_qualified(args: &FunctionArguments) -> SqlResult<Expr> {
    let refuse = || SqlError::new("an interval qualifier follows a difference: (a - b) DAY");
    let FunctionArguments::List(list) = args else {
        return Err(refuse());
    };
    let [FunctionArg::Unnamed(FunctionArgExpr::Expr(units)), FunctionArg::Unnamed(FunctionArgExpr::Expr(diff))] =
        list.args.as_slice()
    else {
        return Err(refuse());
    };
    let units = units.to_string().trim_matches('\'').to_lowercase();
    let mut inner = diff;
    while let Expr::Nested(e) = inner {
        inner = e;
    }
    let Expr::BinaryOp {
        left,
        op: datafusion::sql::sqlparser::ast::BinaryOperator::Minus,
        right,
    } = inner
    else {
        return Err(refuse());
    };
    let (l, r) = (format!("({left})"), format!("({right})"));
    let q = crate::interval::Qualifier::parse(&units).ok_or_else(refuse)?;
    let count = if q.is_long() {
        difference("month", &r, &l).ok_or_else(refuse)?
    } else {
        let ns = |x: &str| format!("{}({x})", crate::nanos::NAME);
        format!("({} - {})", ns(&l), ns(&r))
    };
    generated_expr(
        &format!("{}({count}, '{q}')", crate::interval::functions::QUALIFY),
        &format!("({left} - {right}) {q}"),
    )
}

/// The body of `f` with its parameters replaced by the call's arguments.
fn expand(f: &SqlFunction, args: &FunctionArguments) -> SqlResult<Expr> {
    let args: Vec<&Expr> = match args {
        FunctionArguments::None => vec![],
        FunctionArguments::List(list) => list
            .args
            .iter()
            .map(|a| match a {
                FunctionArg::Unnamed(FunctionArgExpr::Expr(e)) => Ok(e),
                other => Err(SqlError::new(format!(
                    "function '{}' takes plain arguments, not {other}",
                    f.name
                ))),
            })
            .collect::<SqlResult<_>>()?,
        FunctionArguments::Subquery(_) => {
            return Err(SqlError::new(format!(
                "function '{}' takes plain arguments",
                f.name
            )))
        }
    };
    if args.len() != f.params.len() {
        return Err(SqlError::new(format!(
            "function '{}' takes {} arguments, not {}",
            f.name,
            f.params.len(),
            args.len()
        )));
    }
    let values: HashMap<&str, Expr> = f
        .params
        .iter()
        .zip(args)
        .map(|((p, t), a)| (p.as_str(), cast(a.clone(), t.clone())))
        .collect();
    let mut body = f.body.clone();
    let _ = visit_expressions_mut(&mut body, |e: &mut Expr| {
        if let Expr::Identifier(i) = e {
            if let Some(v) = values.get(normalize_ident(i).as_str()) {
                *e = v.clone();
            }
        }
        ControlFlow::<()>::Continue(())
    });
    Ok(cast(body, f.returns.clone()))
}
