//! Parsing a program's text: its statements with their places (past the
//! ones that do not parse, whose errors are kept), the statement a
//! syntax error belongs to, and the names and options statements give.

use std::ops::ControlFlow;

use datafusion::sql::sqlparser::ast::{
    visit_expressions_mut, CreateTableOptions, Expr as SqlExpr, Ident, ObjectName, SqlOption,
    Statement, UnaryOperator, Value,
};
use datafusion::sql::sqlparser::dialect::GenericDialect;
use datafusion::sql::sqlparser::parser::{Parser, ParserError};
use datafusion::sql::sqlparser::tokenizer::{Span, Token, Tokenizer};

use crate::dialect::EddyDialect;
use crate::error::{Location, SqlError, SqlResult};
use crate::{guard, limits};

pub(crate) fn location(span: Span) -> Location {
    Location {
        line: span.start.line,
        column: span.start.column,
    }
}

/// How deeply expressions may nest (sqlparser's default is 50).
pub(crate) const RECURSION_LIMIT: usize = 256;

/// Parses SQL text into statements with the dialect Eddy uses, refusing
/// statements that nest deeper than [`limits::MAX_DEPTH`].
///
/// Text from an untrusted source is parsed on a thread with a stack of
/// [`limits::stack_for_text`] (see [`limits`] for why).
///
/// Unary plus is dropped while parsing: it is the identity on every type,
/// so `+NULL` or `+'text'` mean the operand itself, as in PostgreSQL's
/// treatment of `+NULL` (DataFusion would reject them).
pub fn parse_statements(sql: &str) -> SqlResult<Vec<Statement>> {
    Ok(parse_located(sql)?.into_iter().map(|(s, _)| s).collect())
}

/// [`parse_statements`], with the location where each statement starts
/// (sqlparser gives some statements, `LATENESS` among them, no span).
pub fn parse_located(sql: &str) -> SqlResult<Vec<(Statement, Location)>> {
    let mut parsed = parse_recovering(sql);
    match parsed.errors.is_empty() {
        true => Ok(parsed.statements),
        false => Err(parsed.errors.remove(0).0),
    }
}

/// Program text parsed past its syntax errors: the statements that parse,
/// and for each one that does not its error and the name it was defining
/// (so that errors which only follow from it can be left unsaid).
pub(crate) struct Parsed {
    pub statements: Vec<(Statement, Location)>,
    pub errors: Vec<(SqlError, Option<String>)>,
}

/// Parses each statement of `sql`; one that does not parse is skipped to
/// the `;` that ends it, and its error kept.
pub(crate) fn parse_recovering(sql: &str) -> Parsed {
    let whole = |e: SqlError| Parsed {
        statements: Vec::new(),
        errors: vec![(e, None)],
    };
    let tokens = match Tokenizer::new(&EddyDialect, sql).tokenize_with_location() {
        Ok(tokens) => tokens,
        Err(e) => return whole(parser_error(&ParserError::from(e).to_string())),
    };
    let mut parser = Parser::new(&EddyDialect)
        .with_recursion_limit(RECURSION_LIMIT)
        .with_tokens_with_locations(crate::dialect::adjust_tokens(tokens));
    let mut parsed = Parsed {
        statements: Vec::new(),
        errors: Vec::new(),
    };
    loop {
        while parser.consume_token(&Token::SemiColon) {}
        if parser.peek_token().token == Token::EOF {
            break;
        }
        let at = location(parser.peek_token().span);
        let defines = defined_name(&parser.peek_tokens::<8>());
        let statement = parser.parse_statement().and_then(|s| {
            match parser.consume_token(&Token::SemiColon) || parser.peek_token().token == Token::EOF
            {
                true => Ok(s),
                false => parser.expected("end of statement", parser.peek_token()),
            }
        });
        let checked = statement
            .map_err(|e| match e {
                ParserError::RecursionLimitExceeded => nesting_error(sql),
                other => parser_error(&other.to_string()),
            })
            .and_then(|statement| {
                limits::check_depth(&statement)?;
                guard::check_known_panics(&statement)?;
                Ok(statement)
            });
        match checked {
            Ok(statement) => parsed.statements.push((without_unary_plus(statement), at)),
            Err(e) => {
                let nesting = e.message.contains("nests deeper than");
                parsed.errors.push((e, defines));
                if nesting {
                    // The parser gave up inside the nesting: its place in
                    // the text says nothing about where statements end.
                    break;
                }
                loop {
                    let t = parser.next_token().token;
                    if t == Token::SemiColon || t == Token::EOF {
                        break;
                    }
                }
            }
        }
    }
    parsed
}

/// An error found after a program checked (while it is lowered, or its
/// connectors read), placed at a statement's start, placed more exactly
/// at what its message names in that statement of `text`
/// ([`crate::locate`]).
pub fn placed_in(text: &str, e: SqlError) -> SqlError {
    let (Some(at), None) = (e.location, e.end) else {
        return e;
    };
    let statement = parse_recovering(text)
        .statements
        .into_iter()
        .find(|(_, start)| *start == at);
    let span = statement.and_then(|(s, _)| crate::locate::place(&e.message, &s));
    match span {
        Some(span) => SqlError {
            location: None,
            ..e
        }
        .or_in(span),
        None => e,
    }
}

/// Unary plus dropped: see [`parse_statements`].
pub(crate) fn without_unary_plus(mut statement: Statement) -> Statement {
    let _ = visit_expressions_mut(&mut statement, |e: &mut SqlExpr| {
        while let SqlExpr::UnaryOp {
            op: UnaryOperator::Plus,
            expr,
        } = e
        {
            let inner = std::mem::replace(expr.as_mut(), SqlExpr::Value(Value::Null.into()));
            *e = inner;
        }
        ControlFlow::<()>::Continue(())
    });
    statement
}

/// The table, view, function or type a statement's first tokens define
/// (`CREATE [OR REPLACE] [MATERIALIZED] VIEW name …`), normalized.
pub(crate) fn defined_name(tokens: &[Token]) -> Option<String> {
    let mut words = tokens.iter().map_while(|t| match t {
        Token::Word(w) => Some(w),
        _ => None,
    });
    for w in words.by_ref() {
        let upper = w.value.to_uppercase();
        if ["TABLE", "VIEW", "FUNCTION", "TYPE"].contains(&upper.as_str()) {
            break;
        }
        if ![
            "CREATE",
            "OR",
            "REPLACE",
            "MATERIALIZED",
            "LOCAL",
            "DECLARE",
            "RECURSIVE",
        ]
        .contains(&upper.as_str())
        {
            return None;
        }
    }
    let name = words.next()?;
    Some(match name.quote_style {
        Some(_) => name.value.clone(),
        None => name.value.to_lowercase(),
    })
}

/// The error for text whose parsing recursed past [`RECURSION_LIMIT`]
/// (nested parentheses, subqueries, prefix operators), located where the
/// parentheses nest deepest, or at the start when they do not nest.
pub(crate) fn nesting_error(sql: &str) -> SqlError {
    let message = format!(
        "the statement nests deeper than {RECURSION_LIMIT} levels of parentheses, \
         subqueries or prefix operators"
    );
    let tokens = Tokenizer::new(&GenericDialect {}, sql)
        .tokenize_with_location()
        .unwrap_or_default();
    let mut depth = 0usize;
    let mut deepest = (0usize, None);
    for t in &tokens {
        match t.token {
            Token::LParen => {
                depth += 1;
                if depth > deepest.0 {
                    deepest = (depth, Some(t.span.start));
                }
            }
            Token::RParen => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    let at = deepest.1.or_else(|| {
        tokens
            .iter()
            .find(|t| !matches!(t.token, Token::Whitespace(_)))
            .map(|t| t.span.start)
    });
    match at {
        Some(l) => SqlError::at(message, l.line, l.column),
        None => SqlError::new(message),
    }
}

/// Turns a sqlparser message ("… at Line: 3, Column: 7") into a located
/// error, opening with Feldera's words (`Error parsing SQL: Expected: …`)
/// instead of sqlparser's (`sql parser error: …`).
pub(crate) fn parser_error(message: &str) -> SqlError {
    let owned = match message.strip_prefix("sql parser error: ") {
        Some(rest) => format!("{PARSING}{rest}"),
        None => message.to_string(),
    };
    let message = owned.as_str();
    fn leading_number(s: &str) -> Option<u64> {
        let digits: String = s.chars().take_while(char::is_ascii_digit).collect();
        digits.parse().ok()
    }
    if let Some(pos) = message.rfind(" at Line: ") {
        let tail = &message[pos + " at Line: ".len()..];
        if let Some((l, c)) = tail.split_once(", Column: ") {
            if let (Some(l), Some(c)) = (leading_number(l), leading_number(c)) {
                return SqlError::at(message[..pos].to_string(), l, c);
            }
        }
    }
    SqlError::new(message.to_string())
}

/// How a message about program text that does not parse opens.
pub const PARSING: &str = "Error parsing SQL: ";

/// The normalized name of an identifier: lowercase unless quoted.
pub fn normalize_ident(ident: &Ident) -> String {
    match ident.quote_style {
        Some(_) => ident.value.clone(),
        None => ident.value.to_lowercase(),
    }
}

/// The parts of a dotted name, each normalized.
pub(crate) fn object_parts(name: &ObjectName) -> Vec<String> {
    name.0
        .iter()
        .map(|p| p.as_ident().map(normalize_ident).unwrap_or_default())
        .collect()
}

pub(crate) fn object_name(name: &ObjectName) -> String {
    name.0
        .last()
        .and_then(|p| p.as_ident())
        .map(normalize_ident)
        .unwrap_or_else(|| name.to_string())
}

pub(crate) fn sql_options(options: &CreateTableOptions) -> Vec<(String, String)> {
    let list: &[SqlOption] = match options {
        CreateTableOptions::With(o)
        | CreateTableOptions::Options(o)
        | CreateTableOptions::Plain(o) => o,
        CreateTableOptions::TableProperties(o) => o,
        CreateTableOptions::None => &[],
    };
    list.iter()
        .filter_map(|o| match o {
            SqlOption::KeyValue { key, value } => {
                let v = match value {
                    SqlExpr::Value(v) => match &v.value {
                        Value::SingleQuotedString(s) | Value::DoubleQuotedString(s) => s.clone(),
                        other => other.to_string(),
                    },
                    other => other.to_string(),
                };
                Some((key.value.clone(), v))
            }
            _ => None,
        })
        .collect()
}
