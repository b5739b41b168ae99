//! The error-message corpus (`sql-tests/error-messages.txt`): wrong
//! programs and ad-hoc queries, each with the errors a user must be told,
//! where, and in which words, checked through a real server's REST API as
//! a client (Feldera's Python client, the console) sees them.
//!
//! The corpus is a list of cases:
//!
//! ```text
//! == what the case is about
//! CREATE TABLE t (a INT);
//! CREATE VIEW v AS SELECT b FROM t;
//! !! 2:25-2:26 Column 'b' not found in table 't'
//! ```
//!
//! The lines after `==` are a program; after a line `-- query`, the
//! lines that follow are an ad-hoc query over the program's tables (which
//! must check). Each `!!` line is one error the program or query must
//! report, in order and no more: its place (`line:column`, and
//! `-line:column` where what it names ends, the column after its last
//! character; `?` for an error that has no place in the text) and its
//! message, exactly.
//!
//! `EDDY_SHOW_ERRORS=1` prints what each case reports, in the corpus's
//! form, instead of comparing (for writing new cases; every expectation
//! is read and judged by a person before it goes in).

mod common;

use common::{encode, scratch, Server};
use serde_json::Value;

/// One case of the corpus.
struct Case {
    title: String,
    line: usize,
    program: String,
    query: Option<String>,
    expected: Vec<String>,
}

fn cases() -> Vec<Case> {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../sql-tests/error-messages.txt"
    );
    let text = std::fs::read_to_string(path).expect("the corpus");
    let mut cases: Vec<Case> = Vec::new();
    let mut in_query = false;
    for (i, l) in text.lines().enumerate() {
        if let Some(title) = l.strip_prefix("== ") {
            cases.push(Case {
                title: title.trim().to_string(),
                line: i + 1,
                program: String::new(),
                query: None,
                expected: Vec::new(),
            });
            in_query = false;
            continue;
        }
        let Some(case) = cases.last_mut() else {
            assert!(
                l.is_empty() || l.starts_with('#'),
                "line {}: text before the first case",
                i + 1
            );
            continue;
        };
        if let Some(e) = l.strip_prefix("!! ") {
            case.expected.push(e.to_string());
        } else if l == "-- query" {
            in_query = true;
            case.query = Some(String::new());
        } else if in_query {
            let q = case.query.as_mut().unwrap();
            q.push_str(l);
            q.push('\n');
        } else if !(case.expected.is_empty() && l.starts_with('#')) {
            case.program.push_str(l);
            case.program.push('\n');
        }
    }
    for c in &mut cases {
        c.program = c.program.trim_end().to_string();
        if let Some(q) = &mut c.query {
            *q = q.trim_end().to_string();
        }
    }
    cases
}

/// A place as the corpus writes it.
fn place(start: (u64, u64), end: (u64, u64)) -> String {
    match (start, end) {
        ((0, _), _) => "?".to_string(),
        (s, e) if e > s => format!("{}:{}-{}:{}", s.0, s.1, e.0, e.1),
        (s, _) => format!("{}:{}", s.0, s.1),
    }
}

/// The errors a program reports, in the corpus's form.
fn program_errors(s: &Server, name: &str, program: &str) -> Vec<String> {
    let body = serde_json::json!({"name": name, "program_code": program}).to_string();
    let d = s.ok("PUT", &format!("/v0/pipelines/{name}"), Some(&body));
    if d["program_status"] != "SqlError" {
        return Vec::new();
    }
    let messages = d["program_error"]["sql_compilation"]["messages"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    messages
        .iter()
        .map(|m| {
            let n = |k: &str| m[k].as_u64().unwrap_or(0);
            let at = place(
                (n("start_line_number"), n("start_column")),
                (n("end_line_number"), n("end_column")),
            );
            format!("{at} {}", m["message"].as_str().unwrap_or_default())
        })
        .collect()
}

/// The error an ad-hoc query reports, in the corpus's form (REST says the
/// place before the message: `2:8: Object 'x' not found`).
fn query_error(s: &Server, pipeline: &str, sql: &str) -> Vec<String> {
    let (status, text) = s.send(
        "GET",
        &format!(
            "/v0/pipelines/{pipeline}/query?format=json&sql={}",
            encode(sql)
        ),
        None,
    );
    if status == 200 {
        return Vec::new();
    }
    let v: Value = serde_json::from_str(&text).unwrap_or(Value::String(text));
    let message = v["message"].as_str().unwrap_or_default();
    let placed = message.split_once(": ").and_then(|(at, rest)| {
        let (l, c) = at.split_once(':')?;
        Some(((l.parse().ok()?, c.parse().ok()?), rest))
    });
    vec![match placed {
        Some((at, rest)) => format!("{} {rest}", place(at, at)),
        None => format!("? {message}"),
    }]
}

#[test]
fn every_wrong_program_and_query_is_told_where_and_why_in_sql_terms() {
    let cases = cases();
    assert!(cases.len() >= 50, "the corpus has {} cases", cases.len());
    let show = std::env::var_os("EDDY_SHOW_ERRORS").is_some();
    let dir = scratch("error-messages");
    let s = Server::start(&dir.join("data"), None).owning(dir);
    let mut wrong = Vec::new();
    for (i, case) in cases.iter().enumerate() {
        let name = format!("case{i}");
        let got = match &case.query {
            None => program_errors(&s, &name, &case.program),
            Some(query) => {
                let defined = program_errors(&s, &name, &case.program);
                assert!(
                    defined.is_empty(),
                    "line {}: the program of a query case must check: {defined:?}",
                    case.line
                );
                s.ok("POST", &format!("/v0/pipelines/{name}/start"), None);
                let got = query_error(&s, &name, query);
                s.ok(
                    "POST",
                    &format!("/v0/pipelines/{name}/stop?force=true"),
                    None,
                );
                common::wait_until("stopped", || {
                    s.ok("GET", &format!("/v0/pipelines/{name}"), None)["deployment_status"]
                        == "Stopped"
                });
                got
            }
        };
        if show {
            println!("== {}", case.title);
            for g in &got {
                println!("!! {g}");
            }
        } else if got != case.expected {
            wrong.push(format!(
                "line {} ({}):\n  expected {:#?}\n  got      {got:#?}",
                case.line, case.title, case.expected
            ));
        }
        s.ok("DELETE", &format!("/v0/pipelines/{name}"), None);
    }
    assert!(
        wrong.is_empty(),
        "{} of {} cases differ:\n{}",
        wrong.len(),
        cases.len(),
        wrong.join("\n")
    );
}
