//! SQL mutations at the level of tokens: deletions, duplications, swaps,
//! insertions from a dictionary of SQL's keywords, operators and functions,
//! extreme literals, splices from other seeds, deep nesting and stray bytes.

use datafusion::sql::sqlparser::dialect::GenericDialect;
use datafusion::sql::sqlparser::tokenizer::{Token, Tokenizer};
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::Rng;

/// Pieces of SQL inserted at random.
const DICTIONARY: &[&str] = &[
    "SELECT",
    "FROM",
    "WHERE",
    "GROUP BY",
    "HAVING",
    "ORDER BY",
    "LIMIT",
    "OFFSET",
    "UNION",
    "UNION ALL",
    "INTERSECT",
    "EXCEPT",
    "JOIN",
    "LEFT JOIN",
    "FULL JOIN",
    "CROSS JOIN",
    "ON",
    "USING",
    "AS",
    "CASE",
    "WHEN",
    "THEN",
    "ELSE",
    "END",
    "NOT",
    "NULL",
    "AND",
    "OR",
    "IN",
    "EXISTS",
    "BETWEEN",
    "LIKE",
    "ILIKE",
    "IS",
    "IS NOT NULL",
    "DISTINCT",
    "ALL",
    "ANY",
    "CAST(",
    "TRY_CAST(",
    "OVER (",
    "PARTITION BY",
    "ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW",
    "WITH",
    "RECURSIVE",
    "LATERAL",
    "VALUES",
    "(",
    ")",
    ",",
    "+",
    "-",
    "*",
    "/",
    "%",
    "||",
    "=",
    "<>",
    "<",
    ">",
    "<=",
    ">=",
    "::",
    "[",
    "]",
    ".",
    "?",
    "$1",
    "@",
    "abs(",
    "coalesce(",
    "nullif(",
    "substr(",
    "length(",
    "upper(",
    "repeat(",
    "lpad(",
    "regexp_replace(",
    "regexp_like(",
    "date_trunc(",
    "to_timestamp(",
    "sum(",
    "count(",
    "avg(",
    "min(",
    "max(",
    "array_agg(",
    "string_agg(",
    "generate_series(",
    "unnest(",
    "make_array(",
    "named_struct(",
    "arrow_cast(",
    "power(",
    "factorial(",
    "row_number()",
    "rank()",
    "lag(",
    "first_value(",
    "INTEGER",
    "BIGINT",
    "VARCHAR",
    "DOUBLE",
    "DECIMAL(38, 10)",
    "DATE",
    "TIMESTAMP",
    "INTERVAL",
    "BOOLEAN",
    "BYTEA",
    "TRUE",
    "FALSE",
    "x",
    "t",
    "t.x",
    "*",
    ";",
];

/// Literals at the edges of their types.
const EXTREMES: &[&str] = &[
    "9223372036854775807",
    "-9223372036854775808",
    "9223372036854775808",
    "340282366920938463463374607431768211456",
    "99999999999999999999999999999999999999.9999",
    "1e308",
    "1e-400",
    "-0.0",
    "0",
    "'NaN'",
    "''",
    "'\u{0}'",
    "'ÿ\u{10FFFF}\u{FEFF}'",
    "DATE '9999-12-31'",
    "DATE '0000-01-01'",
    "TIMESTAMP '0001-01-01 00:00:00'",
    "INTERVAL '1000000000 years'",
    "X'FF00'",
    "E'\\\\x00'",
    "2147483647",
    "-2147483648",
];

/// The tokens of `sql` as text pieces (whitespace included).
pub fn tokens(sql: &str) -> Vec<String> {
    match Tokenizer::new(&GenericDialect {}, sql).tokenize() {
        Ok(ts) => ts
            .into_iter()
            .filter(|t| !matches!(t, Token::EOF))
            .map(|t| t.to_string())
            .collect(),
        // Text the tokenizer refuses is mutated by characters.
        Err(_) => sql.chars().map(|c| c.to_string()).collect(),
    }
}

fn span(rng: &mut StdRng, len: usize) -> (usize, usize) {
    let start = rng.gen_range(0..len);
    let end = (start + rng.gen_range(1..=4)).min(len);
    (start, end)
}

/// Applies one to four mutations to `sql`; `other` is a second seed to
/// splice from.
pub fn mutate(rng: &mut StdRng, sql: &str, other: &str) -> String {
    let mut ts = tokens(sql);
    let donor = tokens(other);
    for _ in 0..rng.gen_range(1..=4) {
        if ts.is_empty() {
            ts.push("SELECT".into());
        }
        let len = ts.len();
        match rng.gen_range(0..100) {
            0..=14 => {
                let (a, b) = span(rng, len);
                ts.drain(a..b);
            }
            15..=24 => {
                let (a, b) = span(rng, len);
                let copy: Vec<String> = ts[a..b].to_vec();
                let at = rng.gen_range(0..=len);
                ts.splice(at..at, copy);
            }
            25..=32 => {
                let (a, b) = (rng.gen_range(0..len), rng.gen_range(0..len));
                ts.swap(a, b);
            }
            33..=52 => {
                let at = rng.gen_range(0..=len);
                let word = DICTIONARY.choose(rng).unwrap();
                ts.insert(at, format!(" {word} "));
            }
            53..=64 => {
                let word = EXTREMES.choose(rng).unwrap().to_string();
                let literal = ts.iter().position(|t| {
                    t.starts_with('\'') || t.chars().next().is_some_and(|c| c.is_ascii_digit())
                });
                match literal {
                    Some(i) if rng.gen_bool(0.7) => ts[i] = word,
                    _ => {
                        let at = rng.gen_range(0..=len);
                        ts.insert(at, format!(" {word} "));
                    }
                }
            }
            65..=79 if !donor.is_empty() => {
                let (a, b) = span(rng, len);
                let (c, d) = span(rng, donor.len());
                let d = (c + rng.gen_range(1..=12)).min(donor.len()).max(d);
                ts.splice(a..b, donor[c..d].iter().cloned());
            }
            80..=89 => nest(rng, &mut ts),
            _ => {
                let at = rng.gen_range(0..=len);
                let bytes: String = (0..rng.gen_range(1..8))
                    .map(|_| match rng.gen_range(0..4) {
                        0 => char::from(rng.gen_range(0u8..128)),
                        1 => char::from_u32(rng.gen_range(0x80..0x3000)).unwrap_or('?'),
                        2 => ['\'', '"', '`', '$', '\\', '/', '*', '-'][rng.gen_range(0..8)],
                        _ => ['\n', '\t', '\r', ' '][rng.gen_range(0..4)],
                    })
                    .collect();
                ts.insert(at, bytes);
            }
        }
    }
    ts.concat()
}

/// Nests a part of the statement deeply: parentheses, chains of operators,
/// subqueries, casts, unions.
fn nest(rng: &mut StdRng, ts: &mut Vec<String>) {
    let len = ts.len();
    let depth = *[10, 100, 255, 300, 999, 1001, 3000, 20_000]
        .choose(rng)
        .unwrap();
    let (a, b) = span(rng, len);
    let inner: String = ts[a..b].concat();
    let nested = match rng.gen_range(0..6) {
        0 => format!("{}{inner}{}", "(".repeat(depth), ")".repeat(depth)),
        1 => format!("{inner}{}", " + 1".repeat(depth)),
        2 => format!(
            "{}{inner}{}",
            "(SELECT ".repeat(depth.min(400)),
            ")".repeat(depth.min(400))
        ),
        3 => format!("{inner}{}", "::BIGINT".repeat(depth)),
        4 => format!("{}{inner}", "NOT ".repeat(depth)),
        _ => format!("{inner}{}", " UNION ALL SELECT 1".repeat(depth)),
    };
    ts.splice(a..b, [nested]);
}
