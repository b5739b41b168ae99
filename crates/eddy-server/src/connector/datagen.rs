//! `datagen`: generated rows. The config is a `plan`, a list of phases run
//! in order, each `{"limit"?: rows, "rate"?: rows per second, "fields": {
//! column: {"strategy"?: "increment" | "uniform" | "zipf", "range"?: [a, b],
//! "scale"?: n, "e"?: Zipf exponent, "values"?: [..], "null_percentage"?:
//! p}}}`, and an optional `seed` (Feldera's `workers` is accepted: the rows
//! do not depend on it). Other settings of Feldera's generator (string
//! strategies, nested types, `transaction_size`) are refused by name. A number drawn for a column becomes the column's
//! type: itself for numbers, its decimal text for strings, days or
//! milliseconds since 1970 for dates and timestamps; with `values`, it picks
//! one of them. Columns not named count up from 0.
//!
//! Row `i` is the same whenever it is generated (its random draws come from
//! a generator seeded by `seed` and `i`), so a pipeline resumed from a
//! checkpoint, which records how many rows its state holds, generates the
//! rest exactly as an uninterrupted run would.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use datafusion::arrow::datatypes::{DataType, SchemaRef};
use eddy_io::json::UpdateFormat;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::{position, CheckContext, ConnectorSpec, InputContext, InputRun, Transport};
use crate::runner::{Feeder, Origin};
use crate::stats::EndpointStats;

/// Rows generated per batch when there is no rate.
const BATCH: u64 = 10_000;

/// `datagen`'s configuration.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DatagenConfig {
    /// The phases, run in order (one endless phase when absent).
    plan: Option<Vec<PhaseConfig>>,
    /// Varies every draw.
    #[serde(default)]
    seed: u64,
    /// Feldera's generator tasks: rows are generated here on the
    /// connector's one thread, the same rows for any number, so the
    /// setting is accepted and not needed.
    #[serde(rename = "workers")]
    _workers: Option<u64>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct PhaseConfig {
    limit: Option<u64>,
    rate: Option<u64>,
    #[serde(default)]
    fields: BTreeMap<String, FieldConfig>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FieldConfig {
    #[serde(default)]
    strategy: Strategy,
    range: Option<(i64, i64)>,
    scale: Option<i64>,
    /// The Zipf exponent (Feldera's `e`; `s` is read too).
    e: Option<f64>,
    s: Option<f64>,
    values: Option<Vec<Value>>,
    #[serde(default)]
    null_percentage: f64,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Deserialize)]
#[serde(rename_all = "snake_case")]
enum Strategy {
    #[default]
    Increment,
    Uniform,
    Zipf,
}

#[derive(Debug, Clone)]
struct FieldPlan {
    strategy: Strategy,
    range: Option<(i64, i64)>,
    scale: i64,
    values: Option<Vec<Value>>,
    null_percentage: f64,
    /// Cumulative Zipf weights over the range (or the values).
    zipf_cdf: Vec<f64>,
}

#[derive(Debug, Clone)]
struct Phase {
    limit: Option<u64>,
    rate: Option<u64>,
    fields: Vec<(String, FieldPlan)>,
}

/// A checked datagen config, ready to generate.
#[derive(Debug, Clone)]
pub struct Plan {
    phases: Vec<Phase>,
    seed: u64,
}

fn field_plan(column: &str, v: &FieldConfig) -> Result<FieldPlan, String> {
    if let Some((from, to)) = v.range {
        if from >= to {
            return Err(format!("column '{column}': empty range"));
        }
    }
    if v.values.as_ref().is_some_and(Vec::is_empty) {
        return Err(format!(
            "column '{column}': values must be a non-empty list"
        ));
    }
    if !(0.0..=100.0).contains(&v.null_percentage) {
        return Err(format!(
            "column '{column}': null_percentage must be 0 to 100"
        ));
    }
    let zipf_cdf = if v.strategy == Strategy::Zipf {
        let n = match (&v.values, v.range) {
            (Some(vals), _) => vals.len() as i64,
            (None, Some((a, b))) => b - a,
            (None, None) => return Err(format!("column '{column}': zipf needs a range or values")),
        };
        if n > 10_000_000 {
            return Err(format!(
                "column '{column}': zipf range too large (10,000,000 at most)"
            ));
        }
        let s = v.e.or(v.s).unwrap_or(1.0);
        let mut total = 0.0;
        let mut cdf = Vec::with_capacity(n as usize);
        for k in 1..=n {
            total += 1.0 / (k as f64).powf(s);
            cdf.push(total);
        }
        cdf.iter_mut().for_each(|c| *c /= total);
        cdf
    } else {
        Vec::new()
    };
    Ok(FieldPlan {
        strategy: v.strategy,
        range: v.range,
        scale: v.scale.unwrap_or(1),
        values: v.values.clone(),
        null_percentage: v.null_percentage,
        zipf_cdf,
    })
}

impl Transport for DatagenConfig {
    fn check(&self, _spec: &ConnectorSpec, cx: &CheckContext<'_>) -> Result<(), String> {
        let plan = Plan::new(self)?;
        for phase in &plan.phases {
            for (name, _) in &phase.fields {
                if !cx
                    .columns
                    .iter()
                    .any(|c| c.name().eq_ignore_ascii_case(name))
                {
                    return Err(format!("datagen: the table has no column '{name}'"));
                }
            }
        }
        Ok(())
    }

    fn start_input(
        &self,
        spec: &ConnectorSpec,
        cx: InputContext<'_>,
    ) -> Result<Option<InputRun>, String> {
        let schema = Arc::clone(
            cx.feeder
                .schema(&spec.relation)
                .map_err(|e| e.to_string())?,
        );
        let plan = Plan::new(self)?;
        let from = position::<RowsPosition>(cx.position)?.rows;
        cx.run(spec, move |spec, feeder, stats| {
            plan.run(spec, &schema, feeder, stats, from)
        })
    }
}

/// How many rows the state holds.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct RowsPosition {
    rows: u64,
}

impl Plan {
    /// Checks a datagen config.
    pub fn new(config: &DatagenConfig) -> Result<Self, String> {
        let phases = match &config.plan {
            None => vec![Phase {
                limit: None,
                rate: None,
                fields: Vec::new(),
            }],
            Some(list) => list
                .iter()
                .map(|p| {
                    Ok(Phase {
                        limit: p.limit,
                        rate: p.rate.filter(|&r| r > 0),
                        fields: p
                            .fields
                            .iter()
                            .map(|(k, v)| Ok((k.to_lowercase(), field_plan(k, v)?)))
                            .collect::<Result<_, String>>()?,
                    })
                })
                .collect::<Result<_, String>>()?,
        };
        Ok(Self {
            phases,
            seed: config.seed,
        })
    }

    /// Generates rows into the pipeline, from row `from` on, until every
    /// phase reached its limit or the pipeline stops.
    pub fn run(
        self,
        spec: &ConnectorSpec,
        schema: &SchemaRef,
        feeder: &Feeder,
        stats: &EndpointStats,
        from: u64,
    ) {
        let mut row_index: u64 = 0;
        for phase in &self.phases {
            // Rows of this phase the state already holds.
            let behind = from.saturating_sub(row_index);
            let skipped = phase.limit.map_or(behind, |l| l.min(behind));
            let mut done: u64 = skipped;
            row_index += skipped;
            let started = Instant::now();
            loop {
                let left = phase.limit.map_or(u64::MAX, |l| l - done);
                if left == 0 {
                    break;
                }
                let mut n = left.min(BATCH);
                if let Some(rate) = phase.rate {
                    // Rows due by now at the rate, at least one per tick.
                    let due = skipped + (started.elapsed().as_secs_f64() * rate as f64) as u64;
                    if due <= done {
                        std::thread::sleep(Duration::from_millis(10));
                        if feeder.is_stopping() {
                            return;
                        }
                        continue;
                    }
                    n = n.min(due - done);
                }
                let mut text = String::new();
                for i in 0..n {
                    let index = row_index + i;
                    let mut rng = StdRng::seed_from_u64(
                        self.seed ^ index.wrapping_mul(0x9E37_79B9_7F4A_7C15),
                    );
                    let row = generate(schema, phase, index, &mut rng);
                    text.push_str(&Value::Object(row).to_string());
                    text.push('\n');
                }
                let parsed = eddy_io::json::parse(&text, schema, UpdateFormat::Raw, false);
                for e in parsed.errors.iter().take(1) {
                    stats.error(format!("datagen: {e}"));
                }
                stats
                    .records
                    .fetch_add(parsed.changes.len() as u64, Ordering::Relaxed);
                stats.bytes.fetch_add(text.len() as u64, Ordering::Relaxed);
                let position = RowsPosition {
                    rows: row_index + n,
                };
                let position = serde_json::to_value(position).expect("a number");
                let origin = Origin::at(&spec.name, position);
                if !super::wait_while_paused(feeder)
                    || feeder
                        .feed_blocking(&spec.relation, parsed.changes, origin)
                        .is_err()
                {
                    return;
                }
                done += n;
                row_index += n;
            }
        }
        stats.end_of_input.store(true, Ordering::Relaxed);
    }
}

fn generate(schema: &SchemaRef, phase: &Phase, index: u64, rng: &mut StdRng) -> Map<String, Value> {
    let mut row = Map::new();
    for field in schema.fields() {
        let plan = phase
            .fields
            .iter()
            .find(|(n, _)| n == field.name())
            .map(|(_, p)| p);
        let value = match plan {
            None => typed(field.data_type(), index as i64),
            Some(p) => {
                if p.null_percentage > 0.0 && rng.gen_range(0.0..100.0) < p.null_percentage {
                    Value::Null
                } else {
                    draw(p, field.data_type(), index, rng)
                }
            }
        };
        row.insert(field.name().clone(), value);
    }
    row
}

fn draw(p: &FieldPlan, t: &DataType, index: u64, rng: &mut StdRng) -> Value {
    let (lo, hi) = match (&p.values, p.range) {
        (Some(v), _) => (0, v.len() as i64),
        (None, Some(r)) => r,
        (None, None) => (0, i64::MAX),
    };
    let n = match p.strategy {
        Strategy::Increment => {
            let step = (index as i64).wrapping_mul(p.scale);
            lo + step.rem_euclid(hi - lo)
        }
        Strategy::Uniform => {
            if is_float(t) && p.values.is_none() {
                return Value::from(rng.gen_range(lo as f64..hi as f64));
            }
            rng.gen_range(lo..hi)
        }
        Strategy::Zipf => {
            let u: f64 = rng.gen();
            lo + p.zipf_cdf.partition_point(|&c| c < u) as i64
        }
    };
    match &p.values {
        Some(v) => v[n as usize].clone(),
        None => typed(t, n),
    }
}

fn is_float(t: &DataType) -> bool {
    matches!(t, DataType::Float16 | DataType::Float32 | DataType::Float64)
}

/// A drawn number as a JSON value of the column's type.
fn typed(t: &DataType, n: i64) -> Value {
    match t {
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => Value::from(n.to_string()),
        DataType::Boolean => Value::from(n % 2 != 0),
        DataType::Float16 | DataType::Float32 | DataType::Float64 => Value::from(n as f64),
        DataType::Date32 | DataType::Date64 => {
            let d = chrono::NaiveDate::from_num_days_from_ce_opt(719_163 + n as i32)
                .unwrap_or_default();
            Value::from(d.format("%Y-%m-%d").to_string())
        }
        DataType::Timestamp(_, _) => {
            let t = chrono::DateTime::from_timestamp_millis(n).unwrap_or_default();
            Value::from(t.naive_utc().format("%Y-%m-%dT%H:%M:%S%.3f").to_string())
        }
        // The number in the UUID's last 16 digits.
        t if eddy_io::uuid::is_uuid(t) => {
            Value::from(eddy_io::uuid::text(&(n as u128).to_be_bytes()))
        }
        _ => Value::from(n),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn plans_are_checked() {
        let plan = |v: Value| {
            serde_json::from_value::<DatagenConfig>(v)
                .map_err(|e| e.to_string())
                .and_then(|c| Plan::new(&c))
        };
        assert!(plan(json!({"plan": [{"fields": {"x": {"strategy": "gauss"}}}]})).is_err());
        assert!(plan(json!({"plan": [{"fields": {"x": {"range": [5, 5]}}}]})).is_err());
        assert!(plan(json!({"plan": [{"fields": {"x": {"strategy": "zipf"}}}]})).is_err());
        assert!(plan(json!({"plan": [{"fields": {"x": {"range": "[1, 2]"}}}]})).is_err());
        assert!(plan(json!({"plan": [{"limit": 3}]})).is_ok());
        assert!(plan(json!({"plan": [{"limit": 3}], "workers": 4, "seed": 7})).is_ok());
    }

    fn field(v: Value) -> FieldPlan {
        field_plan("x", &serde_json::from_value(v).unwrap()).unwrap()
    }

    #[test]
    fn draws_follow_their_strategy() {
        let mut rng = StdRng::seed_from_u64(1);
        let inc = field(json!({"range": [10, 13]}));
        let xs: Vec<Value> = (0..5)
            .map(|i| draw(&inc, &DataType::Int64, i, &mut rng))
            .collect();
        assert_eq!(
            xs,
            vec![json!(10), json!(11), json!(12), json!(10), json!(11)]
        );
        let zipf = field(json!({"strategy": "zipf", "range": [0, 100], "e": 1.5}));
        let zeros = (0..1000)
            .filter(|&i| draw(&zipf, &DataType::Int64, i, &mut rng) == json!(0))
            .count();
        assert!(
            zeros > 300,
            "rank 1 of zipf(1.5) over 100 has p≈0.4, got {zeros}/1000"
        );
        let vals = field(json!({"strategy": "uniform", "values": ["a", "b"]}));
        for i in 0..20 {
            let v = draw(&vals, &DataType::Utf8, i, &mut rng);
            assert!(v == json!("a") || v == json!("b"));
        }
        assert_eq!(typed(&DataType::Date32, 1), json!("1970-01-02"));
        assert_eq!(typed(&DataType::Utf8, 7), json!("7"));
    }
}
