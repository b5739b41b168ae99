//! Running sqllogictest scripts against Eddy and reporting the outcome.

use std::hash::{DefaultHasher, Hash, Hasher};
use std::path::Path;

use rand::rngs::StdRng;
use rand::SeedableRng;
use sqllogictest::{Condition, DefaultColumnType, QueryExpect, Record, SortMode, StatementExpect};

use crate::format::{format_batch, hash_values};
use crate::statements::{parse_query, Database};

/// The engine names this runner answers to in `skipif`/`onlyif`.
pub const ENGINE_LABELS: &[&str] = &["postgresql", "eddy"];

/// A query (or statement) whose outcome differed from the expected one.
#[derive(Debug, Clone)]
pub struct Failure {
    /// Line of the record in its file.
    pub line: u32,
    /// The SQL text.
    pub sql: String,
    /// What differed.
    pub reason: String,
}

/// The outcome of one file.
#[derive(Debug, Default, Clone)]
pub struct FileReport {
    /// The file's name, as given.
    pub file: String,
    /// Queries whose results matched.
    pub passed: usize,
    /// Queries that failed (wrong result, or could not be planned or run).
    pub failed: usize,
    /// Statements whose outcome differed from the expected one.
    pub statement_failures: usize,
    /// Failures (of queries or statements) that a documented difference
    /// between PostgreSQL and SQLite explains ([`crate::differences`]).
    pub documented: usize,
    /// Queries not run because of `skipif`/`onlyif`.
    pub skipped: usize,
    /// The first failures, for the report.
    pub failures: Vec<Failure>,
    /// Every failure (query or statement), counted by its kind
    /// ([`failure_kind`]), with the line of the first of each kind.
    pub kinds: std::collections::BTreeMap<String, (usize, u32)>,
}

/// The kind of a failure, for grouping: a wrong result, or the error's
/// message with numbers and quoted names blanked out.
pub fn failure_kind(reason: &str) -> String {
    if reason.starts_with("expected [") {
        return "wrong result".into();
    }
    let mut out = String::new();
    let mut quote: Option<char> = None;
    for c in reason.chars() {
        match quote {
            Some(q) if c == q => {
                out.push(c);
                quote = None;
            }
            Some(_) => {}
            // A quote opens a name unless it is an apostrophe in a word.
            None if (c == '"' || c == '\'' || c == '`')
                && !out.chars().last().is_some_and(char::is_alphanumeric) =>
            {
                out.push(c);
                out.push('…');
                quote = Some(c);
            }
            None if c.is_ascii_digit() => {
                if !out.ends_with('N') {
                    out.push('N');
                }
            }
            None => out.push(c),
        }
        if out.chars().count() >= 120 {
            out.push('…');
            break;
        }
    }
    out
}

/// How many failures a report keeps (`EDDY_SLT_FAILURES`, default 5).
fn kept_failures() -> usize {
    static KEPT: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *KEPT.get_or_init(|| {
        std::env::var("EDDY_SLT_FAILURES")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(5)
    })
}

impl FileReport {
    fn fail(&mut self, line: u32, sql: &str, reason: String) {
        let kind = match crate::differences::explain(&self.file, line, &reason) {
            Some(d) => {
                self.documented += 1;
                format!("documented difference: {}", d.name)
            }
            None => failure_kind(&reason),
        };
        self.kinds.entry(kind).or_insert((0, line)).0 += 1;
        if self.failures.len() < kept_failures() {
            self.failures.push(Failure {
                line,
                sql: sql.to_string(),
                reason,
            });
        }
    }
}

fn skipped(conditions: &[Condition]) -> bool {
    conditions.iter().any(|c| match c {
        Condition::OnlyIf { label } => !ENGINE_LABELS.contains(&label.as_str()),
        Condition::SkipIf { label } => ENGINE_LABELS.contains(&label.as_str()),
    })
}

/// Runs the script in a file.
pub fn run_file(path: &Path, seed: u64) -> FileReport {
    run_file_with(path, seed, Database::new())
}

/// Runs the script in a file with every query's pipeline checkpointed
/// into `scratch` after each step and restored into a new pipeline, which
/// takes the next step: the answers must not change.
pub fn run_file_restarting(path: &Path, seed: u64, scratch: &Path) -> FileReport {
    run_file_with(path, seed, Database::restarting(scratch))
}

/// Runs the script in a file against `db` (a [`Database`] set up to
/// restart its pipelines or to run them with several workers).
pub fn run_file_with(path: &Path, seed: u64, db: Database) -> FileReport {
    match std::fs::read_to_string(path) {
        Ok(text) => run_script_with(db, &text, &path.display().to_string(), seed),
        Err(e) => FileReport {
            file: path.display().to_string(),
            failed: 1,
            failures: vec![Failure {
                line: 0,
                sql: String::new(),
                reason: format!("cannot read: {e}"),
            }],
            ..FileReport::default()
        },
    }
}

/// Runs a script; `name` is used in messages and, with `seed`, seeds the
/// random splits of table contents into steps.
pub fn run_script(text: &str, name: &str, seed: u64) -> FileReport {
    run_script_with(Database::new(), text, name, seed)
}

fn run_script_with(mut db: Database, text: &str, name: &str, seed: u64) -> FileReport {
    let mut report = FileReport {
        file: name.to_string(),
        ..FileReport::default()
    };
    let text = strip_condition_comments(text);
    let records = match sqllogictest::parse_with_name::<DefaultColumnType>(&text, name) {
        Ok(r) => r,
        Err(e) => {
            report.failed = 1;
            report.fail(0, "", format!("cannot parse the script: {e}"));
            return report;
        }
    };
    let mut hash_threshold = 0usize;
    // The file's name, not its path: a run splits the same way wherever
    // the checkout lives, so a failure seen elsewhere repeats here.
    let mut hasher = DefaultHasher::new();
    let file_name = Path::new(name)
        .file_name()
        .map_or(name.into(), |n| n.to_string_lossy());
    file_name.hash(&mut hasher);
    seed.hash(&mut hasher);
    let mut rng = StdRng::seed_from_u64(hasher.finish());
    let mut pending: Vec<Condition> = Vec::new();
    for record in records {
        let conditions = std::mem::take(&mut pending);
        match record {
            Record::Condition(c) => {
                pending = conditions;
                pending.push(c);
            }
            Record::HashThreshold { threshold, .. } => hash_threshold = threshold as usize,
            Record::Halt { .. } if !skipped(&conditions) => break,
            Record::Statement {
                loc,
                conditions,
                sql,
                expected,
                ..
            } => {
                if skipped(&conditions) {
                    continue;
                }
                let outcome = db.execute(&sql);
                let ok = match (&expected, &outcome) {
                    (StatementExpect::Error(_), Err(_)) => true,
                    (StatementExpect::Error(_), Ok(())) => false,
                    (_, Ok(())) => true,
                    (_, Err(_)) => false,
                };
                if !ok {
                    report.statement_failures += 1;
                    let reason = match outcome {
                        Ok(()) => "statement succeeded but an error was expected".to_string(),
                        Err(e) => format!("statement failed: {e}"),
                    };
                    report.fail(loc.line(), &sql, reason);
                }
            }
            Record::Query {
                loc,
                conditions,
                sql,
                expected,
                ..
            } => {
                if skipped(&conditions) {
                    report.skipped += 1;
                    continue;
                }
                match check_query(&db, &sql, &expected, hash_threshold, &mut rng) {
                    Ok(()) => report.passed += 1,
                    Err(reason) => {
                        report.failed += 1;
                        report.fail(loc.line(), &sql, reason);
                    }
                }
            }
            _ => {}
        }
    }
    report
}

/// Prepares a script for the parser: `skipif X # why` (common in the
/// SQLite corpus) becomes `skipif X`, and conditions on a `halt` are
/// decided here. The parser would carry them over to the next statement
/// (so `onlyif mssql` + `halt` at the top of a file skipped its first
/// `CREATE TABLE`): a `halt` that applies to this engine ends the script,
/// one that does not is dropped with its conditions.
fn strip_condition_comments(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut conditions: Vec<&str> = Vec::new();
    for line in text.lines() {
        if line.starts_with("skipif") || line.starts_with("onlyif") {
            conditions.push(line.split('#').next().unwrap_or(line).trim_end());
            continue;
        }
        if line.trim_end() == "halt" {
            if !conditions.iter().any(|c| condition_skips(c)) {
                break;
            }
            // Blank lines in their place keep the line numbers true.
            for _ in conditions.drain(..) {
                out.push('\n');
            }
            out.push('\n');
            continue;
        }
        for c in conditions.drain(..) {
            out.push_str(c);
            out.push('\n');
        }
        out.push_str(line);
        out.push('\n');
    }
    out
}

/// Whether a `skipif X`/`onlyif X` line skips its record for this engine.
fn condition_skips(line: &str) -> bool {
    let mut words = line.split_whitespace();
    let (kind, label) = (words.next(), words.next().unwrap_or(""));
    let ours = ENGINE_LABELS.contains(&label);
    match kind {
        Some("skipif") => ours,
        _ => !ours,
    }
}

/// Parses `N values hashing to H`.
fn hashed(expected: &[String]) -> Option<(usize, &str)> {
    let [line] = expected else { return None };
    let (n, rest) = line.split_once(" values hashing to ")?;
    Some((n.trim().parse().ok()?, rest.trim()))
}

fn check_query(
    db: &Database,
    sql: &str,
    expected: &QueryExpect<DefaultColumnType>,
    hash_threshold: usize,
    rng: &mut StdRng,
) -> Result<(), String> {
    let outcome = parse_query(sql).and_then(|q| db.evaluate(q, 3, Some(rng)));
    let (types, sort_mode, results) = match expected {
        QueryExpect::Error(_) => {
            return match outcome {
                Err(_) => Ok(()),
                Ok(_) => Err("query succeeded but an error was expected".into()),
            }
        }
        QueryExpect::Results {
            types,
            sort_mode,
            results,
            ..
        } => (types, sort_mode, results),
    };
    let batch = outcome.map_err(|e| format!("error: {e}"))?;
    let letters: Vec<char> = types
        .iter()
        .map(|t| match t {
            DefaultColumnType::Integer => 'I',
            DefaultColumnType::FloatingPoint => 'R',
            _ => 'T',
        })
        .collect();
    let mut rows = format_batch(&batch, &letters);
    let mut values: Vec<String> = match sort_mode {
        Some(SortMode::RowSort) => {
            rows.sort();
            rows.iter().flatten().cloned().collect()
        }
        Some(SortMode::ValueSort) => {
            let mut v: Vec<String> = rows.iter().flatten().cloned().collect();
            v.sort();
            v
        }
        _ => rows.iter().flatten().cloned().collect(),
    };
    let mut expected: Vec<String> = results.iter().map(|l| l.trim().to_string()).collect();
    if (hash_threshold > 0 && values.len() > hash_threshold) || hashed(&expected).is_some() {
        values = vec![format!(
            "{} values hashing to {}",
            values.len(),
            hash_values(&values)
        )];
    }
    if values == expected {
        return Ok(());
    }
    // Results written one row per line, values separated by spaces.
    let mut joined: Vec<String> = rows.iter().map(|r| r.join(" ")).collect();
    if matches!(sort_mode, Some(SortMode::RowSort)) {
        joined.sort();
        expected.sort();
    }
    if joined == expected {
        return Ok(());
    }
    let show = |v: &[String]| {
        let mut s = v.iter().take(12).cloned().collect::<Vec<_>>().join(" ");
        if v.len() > 12 {
            s.push_str(" …");
        }
        s
    };
    Err(format!(
        "expected [{}] got [{}]",
        show(&expected),
        show(&values)
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    const BODY: &str = "statement ok
CREATE TABLE t (x INTEGER PRIMARY KEY)

statement ok
INSERT INTO t VALUES (1)

query I nosort
SELECT x FROM t
----
1
";

    #[test]
    fn a_halt_for_another_engine_skips_nothing_after_it() {
        let script = format!("onlyif mssql # not us\nhalt\n\nskipif eddy\nhalt\n\n{BODY}");
        let r = run_script(&script, "halts", 0);
        assert_eq!(
            (r.passed, r.failed, r.statement_failures),
            (1, 0, 0),
            "{r:?}"
        );
    }

    #[test]
    fn line_numbers_stay_those_of_the_file() {
        let script = "onlyif mssql\nhalt\n\nstatement ok\nSELEC 1\n";
        let r = run_script(script, "lines", 0);
        assert_eq!(r.failures[0].line, 4, "{r:?}");
    }

    #[test]
    fn a_halt_for_this_engine_ends_the_script() {
        let script = format!("{BODY}\nonlyif postgresql\nhalt\n\n{BODY}");
        let r = run_script(&script, "halts", 0);
        assert_eq!((r.passed, r.failed), (1, 0), "{r:?}");
    }

    #[test]
    fn failures_are_grouped_by_kind() {
        assert_eq!(failure_kind("expected [1] got [2]"), "wrong result");
        assert_eq!(
            failure_kind("error: 1:18: table or view 't1' not found"),
            "error: N:N: table or view '…' not found"
        );
        assert_eq!(failure_kind("can't cast"), "can't cast");
    }
}
