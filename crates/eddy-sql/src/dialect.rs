//! Eddy's SQL dialect: sqlparser's generic dialect plus the words of
//! Feldera's SQL that sqlparser does not know, added through the
//! dialect's parsing hooks (never by editing program text):
//!
//! * the column option `LATENESS <expr>` in `CREATE TABLE`, parsed into
//!   `ColumnOption::Options([lateness = <expr>])` (see [`column_lateness`]);
//! * the statement `LATENESS view.column <expr>;`, parsed into a
//!   `SET HIVEVAR:view.column = <expr>` statement (see [`lateness_statement`]):
//!   the generic dialect never produces a `HIVEVAR` assignment, so the
//!   statement cannot be mistaken for one a user wrote.
//!
//! * `TABLE name` where an expression is expected (the first argument of
//!   `TUMBLE`/`HOP`), parsed into the call `TABLE(name)` (see [`crate::tvf`]).
//!
//! * `CREATE FUNCTION f(x T, …) RETURNS T AS <expression>`, whose body
//!   the generic dialect reads only as a string (see [`crate::functions`]).
//!
//! * `DECLARE RECURSIVE VIEW name (column type, …)`, Feldera's forward
//!   declaration of a recursive view, parsed into a `DECLARE` statement
//!   whose one declaration has the type `TABLE (columns)` (see
//!   [`recursive_declaration`]): the generic dialect never produces one.
//!
//! Everything else parses exactly as with `GenericDialect`: the dialect
//! reports the generic dialect's type, so sqlparser's per-dialect choices
//! are the same.

use std::any::TypeId;

use datafusion::sql::sqlparser::ast::{
    ColumnDef, ColumnOption, ColumnOptionDef, CreateFunction, CreateFunctionBody, DataType,
    Declare, Expr, Function, FunctionArg, FunctionArgExpr, FunctionArgumentList, FunctionArguments,
    FunctionReturnType, Ident, ObjectName, OperateFunctionArg, Set, SqlOption, Statement,
    UserDefinedTypeCompositeAttributeDef, UserDefinedTypeRepresentation,
};
use datafusion::sql::sqlparser::dialect::{Dialect, GenericDialect, Precedence};
use datafusion::sql::sqlparser::keywords::Keyword;
use datafusion::sql::sqlparser::parser::{Parser, ParserError};
use datafusion::sql::sqlparser::tokenizer::{Span, Token, TokenWithSpan};

/// The dialect Eddy parses programs with.
#[derive(Debug, Default, Clone, Copy)]
pub struct EddyDialect;

/// The key under which a column's lateness is kept in its options.
const LATENESS: &str = "lateness";

fn next_is_word(parser: &Parser, word: &str) -> bool {
    matches!(&parser.peek_token().token, Token::Word(w)
        if w.quote_style.is_none() && w.value.eq_ignore_ascii_case(word))
}

macro_rules! generic {
    ($($name:ident),* $(,)?) => {
        $(fn $name(&self) -> bool {
            GenericDialect {}.$name()
        })*
    };
}

impl Dialect for EddyDialect {
    fn dialect(&self) -> TypeId {
        TypeId::of::<GenericDialect>()
    }

    fn is_delimited_identifier_start(&self, ch: char) -> bool {
        GenericDialect {}.is_delimited_identifier_start(ch)
    }

    fn is_identifier_start(&self, ch: char) -> bool {
        GenericDialect {}.is_identifier_start(ch)
    }

    fn is_identifier_part(&self, ch: char) -> bool {
        GenericDialect {}.is_identifier_part(ch)
    }

    /// `x IN ()`, as SQLite accepts it: false (and `NOT IN ()` true).
    fn supports_in_empty_list(&self) -> bool {
        true
    }

    /// Feldera's map type, `MAP<K, V>` (used only where a type is read).
    fn supports_map_literal_with_angle_brackets(&self) -> bool {
        true
    }

    generic!(
        supports_unicode_string_literal,
        supports_partition_by_after_order_by,
        supports_array_join_syntax,
        supports_group_by_expr,
        supports_group_by_with_modifier,
        supports_left_associative_joins_without_parens,
        supports_connect_by,
        supports_match_recognize,
        supports_pipe_operator,
        supports_start_transaction_modifier,
        supports_window_function_null_treatment_arg,
        supports_dictionary_syntax,
        supports_window_clause_named_window_reference,
        supports_parenthesized_set_variables,
        supports_select_wildcard_except,
        support_map_literal_syntax,
        allow_extract_custom,
        allow_extract_single_quotes,
        supports_extract_comma_syntax,
        supports_create_view_comment_syntax,
        supports_parens_around_table_factor,
        supports_values_as_table_factor,
        supports_create_index_with_clause,
        supports_explain_with_utility_options,
        supports_limit_comma,
        supports_update_order_by,
        supports_from_first_select,
        supports_projection_trailing_commas,
        supports_asc_desc_in_column_definition,
        supports_try_convert,
        supports_bitwise_shift_operators,
        supports_comment_on,
        supports_load_extension,
        supports_named_fn_args_with_assignment_operator,
        supports_struct_literal,
        supports_empty_projections,
        supports_nested_comments,
        supports_multiline_comment_hints,
        supports_user_host_grantee,
        supports_string_escape_constant,
        supports_array_typedef_with_brackets,
        supports_match_against,
        supports_set_names,
        supports_comma_separated_set_assignments,
        supports_filter_during_aggregation,
        supports_select_wildcard_exclude,
        supports_data_type_signed_suffix,
        supports_interval_options,
        supports_quote_delimited_string,
        supports_select_wildcard_replace,
        supports_select_wildcard_ilike,
        supports_select_wildcard_rename,
        supports_optimize_table,
        supports_install,
        supports_detach,
        supports_prewhere,
        supports_with_fill,
        supports_limit_by,
        supports_interpolate,
        supports_settings,
        supports_select_format,
        supports_comment_optimizer_hint,
        supports_constraint_keyword_without_name,
        supports_key_column_option,
        supports_comma_separated_trim,
        supports_cte_without_as,
        supports_select_item_multi_column_alias,
        supports_xml_expressions,
    );

    /// The period predicates (`(a, b) PRECEDES (c, d)`, see
    /// [`crate::period`]) bind as comparisons do.
    fn get_next_precedence(&self, parser: &Parser) -> Option<Result<u8, ParserError>> {
        period_ahead(parser).map(|_| Ok(self.prec_value(Precedence::Between)))
    }

    /// A period predicate after a parenthesized period is the call of its
    /// function: `(a, b) OP (c, d)` is `eddy_period_op(a, b, c, d)`, and
    /// `(a, b) CONTAINS v` gives `v` as both ends of the second period.
    fn parse_infix(
        &self,
        parser: &mut Parser,
        expr: &Expr,
        precedence: u8,
    ) -> Option<Result<Expr, ParserError>> {
        let (op, words) = period_ahead(parser)?;
        let left = match expr {
            Expr::Tuple(items) => items.clone(),
            Expr::Nested(inner) => vec![inner.as_ref().clone()],
            _ => return None,
        };
        for _ in 0..words {
            parser.next_token();
        }
        Some((|| {
            let right = match parser.parse_subexpr(precedence)? {
                Expr::Tuple(items) => items,
                Expr::Nested(inner) if op != "CONTAINS" => vec![*inner],
                single if op == "CONTAINS" && left.len() == 2 => vec![single.clone(), single],
                single => vec![single],
            };
            Ok(call(
                &crate::period::call_name(op),
                left.into_iter().chain(right).collect(),
            ))
        })())
    }

    fn parse_column_option(
        &self,
        parser: &mut Parser,
    ) -> Result<Option<Result<Option<ColumnOption>, ParserError>>, ParserError> {
        if !next_is_word(parser, LATENESS) {
            return Ok(None);
        }
        parser.next_token();
        let value = parser.parse_expr()?;
        Ok(Some(Ok(Some(ColumnOption::Options(vec![
            SqlOption::KeyValue {
                key: Ident::new(LATENESS),
                value,
            },
        ])))))
    }

    /// `TABLE name` as an argument (of the window table functions) is the
    /// call `TABLE(name)`.
    ///
    /// Feldera's map constructor `MAP[k1, v1, k2, v2, …]`, and its
    /// function form `MAP(k1, v1, …)`, are the call `make_map(k1, v1, k2,
    /// v2, …)`: the function form's arguments are pairs whatever their
    /// types (`MAP(ARRAY['a'], ARRAY[1])` maps an array to an array), not
    /// DataFusion's list of keys and list of values. `MAP(SELECT …)` is
    /// left to DataFusion.
    fn parse_prefix(&self, parser: &mut Parser) -> Option<Result<Expr, ParserError>> {
        let close = match parser.peek_nth_token(1).token {
            Token::LBracket => Some(Token::RBracket),
            Token::LParen
                if !matches!(
                    &parser.peek_nth_token(2).token,
                    Token::Word(w) if w.keyword == Keyword::SELECT || w.keyword == Keyword::WITH
                ) =>
            {
                Some(Token::RParen)
            }
            _ => None,
        };
        if let (true, Some(close)) = (is_word(&parser.peek_token().token, "MAP"), close) {
            parser.next_token();
            parser.next_token();
            return Some((|| {
                let items = if parser.consume_token(&close) {
                    vec![]
                } else {
                    let items = parser.parse_comma_separated(Parser::parse_expr)?;
                    parser.expect_token(&close)?;
                    items
                };
                if items.len() % 2 != 0 {
                    return parser.expected("a value for each key of MAP[…]", parser.peek_token());
                }
                Ok(call("make_map", items))
            })());
        }
        let is_table = matches!(&parser.peek_token().token, Token::Word(w)
            if w.quote_style.is_none() && w.value.eq_ignore_ascii_case("TABLE"));
        if !is_table || !matches!(parser.peek_nth_token(1).token, Token::Word(_)) {
            return None;
        }
        parser.next_token();
        Some((|| {
            let name = parser.parse_object_name(false)?;
            let parts: Vec<Ident> = name
                .0
                .iter()
                .filter_map(|p| p.as_ident().cloned())
                .collect();
            let table = match parts.as_slice() {
                [one] => Expr::Identifier(one.clone()),
                _ => Expr::CompoundIdentifier(parts),
            };
            Ok(call("TABLE", vec![table]))
        })())
    }

    fn parse_statement(&self, parser: &mut Parser) -> Option<Result<Statement, ParserError>> {
        if is_create_function(parser) {
            return Some(parse_create_function(parser));
        }
        if is_declare_recursive_view(parser) {
            return Some(parse_declare_recursive_view(parser));
        }
        if is_create_type(parser) {
            return Some(parse_create_type(parser));
        }
        if !next_is_word(parser, LATENESS) {
            return None;
        }
        parser.next_token();
        Some((|| {
            let variable = parser.parse_object_name(false)?;
            let value = parser.parse_expr()?;
            Ok(Statement::Set(Set::SingleAssignment {
                scope: None,
                hivevar: true,
                variable,
                values: vec![value],
            }))
        })())
    }
}

/// The period predicate that the next tokens spell (one of
/// [`crate::period::OPERATORS`]) and how many words it takes: only right
/// after a parenthesized period, and unless what follows shows that the
/// word is a name (`(a) contains,`).
fn period_ahead(parser: &Parser) -> Option<(&'static str, usize)> {
    if parser.get_current_token().token != Token::RParen {
        return None;
    }
    let word = |n: usize| match parser.peek_nth_token_ref(n).token.clone() {
        Token::Word(w) if w.quote_style.is_none() => Some(w.value.to_uppercase()),
        _ => None,
    };
    let (op, words) = match word(0)?.as_str() {
        "IMMEDIATELY" => match word(1)?.as_str() {
            "PRECEDES" => ("IMMEDIATELY PRECEDES", 2),
            "SUCCEEDS" => ("IMMEDIATELY SUCCEEDS", 2),
            _ => return None,
        },
        w => (*crate::period::OPERATORS.iter().find(|o| **o == w)?, 1),
    };
    let after = &parser.peek_nth_token_ref(words).token;
    let name_follows = matches!(
        after,
        Token::Comma | Token::EOF | Token::SemiColon | Token::RParen
    ) || matches!(after, Token::Word(w) if w.keyword == Keyword::FROM);
    (!name_follows).then_some((op, words))
}

/// The call `name(args)`.
fn call(name: &str, args: Vec<Expr>) -> Expr {
    Expr::Function(Function {
        name: ObjectName::from(vec![Ident::new(name)]),
        uses_odbc_syntax: false,
        parameters: FunctionArguments::None,
        args: FunctionArguments::List(FunctionArgumentList {
            duplicate_treatment: None,
            args: args
                .into_iter()
                .map(|a| FunctionArg::Unnamed(FunctionArgExpr::Expr(a)))
                .collect(),
            clauses: vec![],
        }),
        filter: None,
        null_treatment: None,
        over: None,
        within_group: vec![],
    })
}

fn is_word(t: &Token, word: &str) -> bool {
    matches!(t, Token::Word(w) if w.quote_style.is_none() && w.value.eq_ignore_ascii_case(word))
}

/// Token-level adjustments for Feldera's SQL where sqlparser has no hook,
/// applied to the token stream (never to the text):
///
/// * a column named `key` (`CREATE TABLE t (key BIGINT, …)`) is read as an
///   identifier, not as MySQL's `KEY` index clause: an unquoted `KEY` right
///   after `(` or `,` and followed by a word becomes the identifier `key`;
/// * Feldera's array type suffix, `T ARRAY` (`INT ARRAY`, `VARCHAR ARRAY
///   ARRAY`), becomes `T[]`: an unquoted `ARRAY` right after a type (a
///   type's name, its closing `)` or `>`, or another suffix) and not
///   followed by `[`, `(` or `<` (the array constructors and `ARRAY<T>`);
/// * Feldera's structure type `ROW(name type [NULL | NOT NULL], …)`
///   becomes `STRUCT<name type, …>` (a `ROW (` followed by two words, a
///   field's name and its type's, where the constructor `ROW(a, b)` has
///   expressions); a field's nullability is dropped, as in `CREATE TYPE`;
/// * an interval-qualified difference, `(a - b) MONTH` or `(a - b) DAY TO
///   HOUR` (a `)` closing parentheses that hold a `-` at their level,
///   followed by a time unit), becomes the call
///   `__eddy_interval('DAY TO HOUR', (a - b))` that [`crate::functions`]
///   rewrites;
/// * `INTERVAL t.c MONTH` becomes `INTERVAL (t.c) MONTH`;
/// * `x BETWEEN SYMMETRIC a AND b` becomes `x BETWEEN __eddy_symmetric(a)
///   AND b` (see [`crate::functions`]), `BETWEEN ASYMMETRIC` `BETWEEN`;
/// * `LEFT [OUTER] ASOF JOIN r MATCH_CONDITION cond ON …` becomes
///   `ASOF JOIN r MATCH_CONDITION (LEFT_ASOF(cond)) ON …`, and a condition
///   without parentheses gets them (see [`crate::asof`]).
pub fn adjust_tokens(tokens: Vec<TokenWithSpan>) -> Vec<TokenWithSpan> {
    let sig: Vec<usize> = (0..tokens.len())
        .filter(|&i| !matches!(tokens[i].token, Token::Whitespace(_)))
        .collect();
    let mut removed = vec![false; tokens.len()];
    let mut before: Vec<Vec<Token>> = vec![Vec::new(); tokens.len() + 1];
    let mut renamed: Vec<usize> = Vec::new();
    let mut suffixes: Vec<usize> = Vec::new();
    let mut replaced: Vec<(usize, Token)> = Vec::new();
    for (p, &i) in sig.iter().enumerate() {
        let t = &tokens[i].token;
        let prev = |k: usize| p.checked_sub(k).map(|q| &tokens[sig[q]].token);
        if is_word(t, "ROW") {
            row_type(&tokens, &sig, p, &mut replaced, &mut removed);
        }
        if *t == Token::RParen {
            interval_qualifier(&tokens, &sig, p, &mut before, &mut removed);
        }
        if is_word(t, "INTERVAL") {
            interval_of_column(&tokens, &sig, p, &mut before);
        }
        if is_word(t, "BETWEEN") {
            between_symmetric(&tokens, &sig, p, &mut before, &mut removed);
        }
        if is_word(t, "ARRAY")
            && prev(1).is_some_and(ends_type)
            && !matches!(
                sig.get(p + 1).map(|&j| &tokens[j].token),
                Some(Token::LBracket | Token::LParen | Token::Lt)
            )
        {
            suffixes.push(i);
            continue;
        }
        if is_word(t, "KEY")
            && matches!(prev(1), Some(Token::LParen | Token::Comma))
            && matches!(
                sig.get(p + 1).map(|&j| &tokens[j].token),
                Some(Token::Word(_))
            )
        {
            renamed.push(i);
        }
        if !is_word(t, "ASOF") {
            continue;
        }
        let mut left = false;
        if prev(1).is_some_and(|t| is_word(t, "LEFT")) {
            left = true;
            removed[sig[p - 1]] = true;
        } else if prev(1).is_some_and(|t| is_word(t, "OUTER"))
            && prev(2).is_some_and(|t| is_word(t, "LEFT"))
        {
            left = true;
            removed[sig[p - 1]] = true;
            removed[sig[p - 2]] = true;
        }
        let Some(m) =
            (p + 1..sig.len()).find(|&q| is_word(&tokens[sig[q]].token, "MATCH_CONDITION"))
        else {
            continue;
        };
        let mut depth = 0i32;
        let mut end = sig.len();
        for (q, &j) in sig.iter().enumerate().skip(m + 1) {
            match &tokens[j].token {
                Token::LParen => depth += 1,
                Token::RParen if depth == 0 => {
                    end = q;
                    break;
                }
                Token::RParen => depth -= 1,
                Token::SemiColon | Token::EOF => {
                    end = q;
                    break;
                }
                t if depth == 0 && (is_word(t, "ON") || is_word(t, "USING")) => {
                    end = q;
                    break;
                }
                _ => {}
            }
        }
        let open = sig[m] + 1;
        let close = sig.get(end).copied().unwrap_or(tokens.len());
        before[open].push(Token::LParen);
        if left {
            before[open].push(Token::make_word(crate::asof::LEFT_MARKER, None));
            before[open].push(Token::LParen);
            before[close].push(Token::RParen);
        }
        before[close].push(Token::RParen);
    }
    let mut out = Vec::with_capacity(tokens.len() + 8);
    for (i, mut t) in tokens.into_iter().enumerate() {
        let span = t.span;
        for extra in before[i].drain(..) {
            out.push(TokenWithSpan { token: extra, span });
        }
        if removed[i] {
            continue;
        }
        if let Some((_, with)) = replaced.iter().find(|(j, _)| *j == i) {
            out.push(TokenWithSpan {
                token: with.clone(),
                span,
            });
            continue;
        }
        if suffixes.contains(&i) {
            out.push(TokenWithSpan {
                token: Token::LBracket,
                span,
            });
            out.push(TokenWithSpan {
                token: Token::RBracket,
                span,
            });
            continue;
        }
        if renamed.contains(&i) {
            if let Token::Word(w) = &mut t.token {
                w.value = w.value.to_lowercase();
                w.quote_style = Some('"');
                w.keyword = Keyword::NoKeyword;
            }
        }
        out.push(t);
    }
    let span = out.last().map(|t| t.span).unwrap_or(Span::empty());
    let last = before.len() - 1;
    for extra in before[last].drain(..) {
        out.push(TokenWithSpan { token: extra, span });
    }
    out
}

/// The name of the call an interval-qualified difference becomes.
pub const INTERVAL_QUALIFIED: &str = "__eddy_interval";

const TIME_UNITS: &[&str] = &["YEAR", "MONTH", "DAY", "HOUR", "MINUTE", "SECOND"];

/// Whether `t` names a unit of an interval qualifier.
fn is_time_unit(t: &Token) -> bool {
    TIME_UNITS.iter().any(|u| is_word(t, u))
}

/// When the significant token `p` (a `)`) closes a difference followed by
/// a time unit (`(a - b) DAY [TO HOUR]`), marks the tokens that make it the
/// call `__eddy_interval('DAY TO HOUR', (a - b))`.
fn interval_qualifier(
    tokens: &[TokenWithSpan],
    sig: &[usize],
    p: usize,
    before: &mut [Vec<Token>],
    removed: &mut [bool],
) {
    let at = |q: usize| sig.get(q).map(|&j| &tokens[j].token);
    let unit = |q: usize| at(q).is_some_and(is_time_unit);
    if !unit(p + 1) {
        return;
    }
    let mut last = p + 1;
    if at(p + 2).is_some_and(|t| is_word(t, "TO")) && unit(p + 3) {
        last = p + 3;
    }
    if matches!(at(last + 1), Some(Token::LParen)) {
        return;
    }
    // The matching `(`, and a `-` at the level just inside it.
    let (mut depth, mut minus, mut open) = (0i32, false, None);
    for q in (0..p).rev() {
        match at(q) {
            Some(Token::RParen) => depth += 1,
            Some(Token::LParen) if depth == 0 => {
                open = Some(q);
                break;
            }
            Some(Token::LParen) => depth -= 1,
            Some(Token::Minus) if depth == 0 => minus = true,
            _ => {}
        }
    }
    let Some(open) = open.filter(|_| minus) else {
        return;
    };
    let units: Vec<String> = (p + 1..=last)
        .filter_map(|q| match at(q) {
            Some(Token::Word(w)) => Some(w.value.to_uppercase()),
            _ => None,
        })
        .collect();
    let call = &mut before[sig[open]];
    call.push(Token::make_word(INTERVAL_QUALIFIED, None));
    call.push(Token::LParen);
    call.push(Token::SingleQuotedString(units.join(" ")));
    call.push(Token::Comma);
    before[sig[p + 1]].push(Token::RParen);
    for q in p + 1..=last {
        removed[sig[q]] = true;
    }
}

/// The call that marks the low bound of `x BETWEEN SYMMETRIC a AND b`.
pub const SYMMETRIC_MARKER: &str = "__eddy_symmetric";

/// When the significant token `p` (a `BETWEEN`) is followed by `SYMMETRIC`,
/// marks the low bound as `__eddy_symmetric(a)` for [`crate::functions`]
/// to rewrite; `ASYMMETRIC`, the default, is dropped.
fn between_symmetric(
    tokens: &[TokenWithSpan],
    sig: &[usize],
    p: usize,
    before: &mut [Vec<Token>],
    removed: &mut [bool],
) {
    let at = |q: usize| sig.get(q).map(|&j| &tokens[j].token);
    match at(p + 1) {
        Some(t) if is_word(t, "ASYMMETRIC") => removed[sig[p + 1]] = true,
        Some(t) if is_word(t, "SYMMETRIC") => {
            // The `AND` that ends the low bound, at its nesting level.
            let mut depth = 0i32;
            let mut q = p + 2;
            loop {
                match at(q) {
                    None => return,
                    Some(Token::LParen | Token::LBracket) => depth += 1,
                    Some(Token::RParen | Token::RBracket) => depth -= 1,
                    Some(t) if depth == 0 && is_word(t, "AND") => break,
                    _ => {}
                }
                if depth < 0 {
                    return;
                }
                q += 1;
            }
            removed[sig[p + 1]] = true;
            before[sig[p + 1]].push(Token::make_word(SYMMETRIC_MARKER, None));
            before[sig[p + 1]].push(Token::LParen);
            before[sig[q]].push(Token::RParen);
        }
        _ => {}
    }
}

/// When the significant token `p` (an `INTERVAL`) is followed by a column
/// and a time unit (`INTERVAL t.c MONTH`, Feldera's interval of a column's
/// text), puts the column in parentheses, which the parser takes as the
/// interval's value (it reads no dotted name there).
fn interval_of_column(
    tokens: &[TokenWithSpan],
    sig: &[usize],
    p: usize,
    before: &mut [Vec<Token>],
) {
    let at = |q: usize| sig.get(q).map(|&j| &tokens[j].token);
    let unit = |q: usize| at(q).is_some_and(is_time_unit);
    let word = |q: usize| matches!(at(q), Some(Token::Word(_))) && !unit(q);
    let mut q = p + 1;
    if !word(q) {
        return;
    }
    while matches!(at(q + 1), Some(Token::Period)) && word(q + 2) {
        q += 2;
    }
    if !unit(q + 1) {
        return;
    }
    before[sig[p + 1]].push(Token::LParen);
    before[sig[q + 1]].push(Token::RParen);
}

/// When the significant token `p` (a `ROW`) opens a structure type,
/// `ROW(name type …)`, marks it and its parentheses to be replaced by
/// `STRUCT<…>` and the fields' `NULL`/`NOT NULL` to be removed.
fn row_type(
    tokens: &[TokenWithSpan],
    sig: &[usize],
    p: usize,
    replaced: &mut Vec<(usize, Token)>,
    removed: &mut [bool],
) {
    let at = |q: usize| sig.get(q).map(|&j| &tokens[j].token);
    // `ROW(name type …)`, or `ROW(type, …)` with fields named by position.
    let named = matches!(at(p + 2), Some(Token::Word(_)))
        && at(p + 3).is_some_and(|t| matches!(t, Token::Word(_)) && ends_type(t));
    // (`ROW(NULL, …)` is a value: NULL ends a type but does not start one.)
    let unnamed = at(p + 2).is_some_and(|t| {
        matches!(t, Token::Word(w) if w.keyword != Keyword::NoKeyword)
            && ends_type(t)
            && !is_word(t, "NULL")
    }) && matches!(
        at(p + 3),
        Some(Token::Comma | Token::RParen | Token::LParen)
    );
    let is_type_start = named || unnamed;
    if at(p + 1) != Some(&Token::LParen) || !is_type_start {
        return;
    }
    let mut depth = 0i32;
    let mut q = p + 1;
    while let Some(t) = at(q) {
        match t {
            Token::LParen | Token::Lt => depth += 1,
            Token::RParen | Token::Gt => {
                depth -= 1;
                if depth == 0 {
                    break;
                }
            }
            Token::ShiftRight => depth -= 2,
            Token::SemiColon | Token::EOF => return,
            t if depth == 1 && is_word(t, "NULL") => {
                removed[sig[q]] = true;
                if at(q - 1).is_some_and(|t| is_word(t, "NOT")) {
                    removed[sig[q - 1]] = true;
                }
            }
            _ => {}
        }
        q += 1;
    }
    if at(q) != Some(&Token::RParen) {
        return;
    }
    replaced.push((sig[p], Token::make_keyword("STRUCT")));
    replaced.push((sig[p + 1], Token::Lt));
    replaced.push((sig[q], Token::Gt));
}

/// Whether a type can end with `t`, so that `ARRAY` after it is the
/// array suffix: the last word of a type's name, a closing `)` or `>`
/// (`DECIMAL(6, 2)`, `MAP<K, V>`), or a user-defined type's name.
fn ends_type(t: &Token) -> bool {
    const TYPE_WORDS: &[&str] = &[
        "BOOLEAN",
        "BOOL",
        "TINYINT",
        "SMALLINT",
        "INT",
        "INTEGER",
        "INT2",
        "INT4",
        "INT8",
        "BIGINT",
        "UNSIGNED",
        "DECIMAL",
        "NUMERIC",
        "DEC",
        "REAL",
        "FLOAT",
        "DOUBLE",
        "PRECISION",
        "VARCHAR",
        "CHAR",
        "CHARACTER",
        "VARYING",
        "TEXT",
        "STRING",
        "DATE",
        "TIME",
        "TIMESTAMP",
        "ZONE",
        "INTERVAL",
        "VARBINARY",
        "BINARY",
        "BYTEA",
        "UUID",
        "VARIANT",
        "ARRAY",
        "NULL",
        "MAP",
        "ROW",
    ];
    match t {
        Token::RParen | Token::Gt | Token::RBracket => true,
        Token::Word(w) => {
            w.quote_style.is_none()
                && (w.keyword == Keyword::NoKeyword
                    || TYPE_WORDS.iter().any(|k| w.value.eq_ignore_ascii_case(k)))
        }
        _ => false,
    }
}

/// Whether the next tokens are `CREATE TYPE`.
fn is_create_type(parser: &Parser) -> bool {
    let word = |i: usize, w: &str| {
        matches!(&parser.peek_nth_token(i).token, Token::Word(x)
            if x.quote_style.is_none() && x.value.eq_ignore_ascii_case(w))
    };
    word(0, "CREATE") && word(1, "TYPE")
}

/// `CREATE TYPE name AS (field type [NULL | NOT NULL], …)`, Feldera's
/// user-defined structure type, parsed into sqlparser's composite
/// `CREATE TYPE` (which has no place for a field's nullability: the
/// fields of a structure are nullable, see docs/sql.md).
fn parse_create_type(parser: &mut Parser) -> Result<Statement, ParserError> {
    parser.expect_keyword_is(Keyword::CREATE)?;
    parser.expect_keyword_is(Keyword::TYPE)?;
    let name = parser.parse_object_name(false)?;
    parser.expect_keyword_is(Keyword::AS)?;
    parser.expect_token(&Token::LParen)?;
    let columns = parser.parse_comma_separated(Parser::parse_column_def)?;
    parser.expect_token(&Token::RParen)?;
    let mut attributes = Vec::with_capacity(columns.len());
    for c in columns {
        if let Some(o) = c
            .options
            .iter()
            .find(|o| !matches!(o.option, ColumnOption::Null | ColumnOption::NotNull))
        {
            return parser.expected(
                "NULL or NOT NULL after a field's type in CREATE TYPE",
                TokenWithSpan::wrap(Token::make_word(&o.option.to_string(), None)),
            );
        }
        attributes.push(UserDefinedTypeCompositeAttributeDef {
            name: c.name,
            data_type: c.data_type,
            collation: None,
        });
    }
    Ok(Statement::CreateType {
        name,
        representation: Some(UserDefinedTypeRepresentation::Composite { attributes }),
    })
}

/// Whether the next tokens are `CREATE [OR REPLACE] FUNCTION`.
fn is_create_function(parser: &Parser) -> bool {
    let word = |i: usize, w: &str| {
        matches!(&parser.peek_nth_token(i).token, Token::Word(x)
            if x.quote_style.is_none() && x.value.eq_ignore_ascii_case(w))
    };
    word(0, "CREATE")
        && (word(1, "FUNCTION") || (word(1, "OR") && word(2, "REPLACE") && word(3, "FUNCTION")))
}

/// Whether the next tokens are `DECLARE RECURSIVE VIEW`.
fn is_declare_recursive_view(parser: &Parser) -> bool {
    ["DECLARE", "RECURSIVE", "VIEW"]
        .iter()
        .enumerate()
        .all(|(i, w)| is_word(&parser.peek_nth_token(i).token, w))
}

/// `DECLARE RECURSIVE VIEW name (column type, …)`.
fn parse_declare_recursive_view(parser: &mut Parser) -> Result<Statement, ParserError> {
    for _ in 0..3 {
        parser.next_token();
    }
    let name = parser.parse_identifier()?;
    let (columns, constraints) = parser.parse_columns()?;
    if columns.is_empty() || !constraints.is_empty() {
        return parser.expected("the view's columns with their types", parser.peek_token());
    }
    Ok(Statement::Declare {
        stmts: vec![Declare {
            names: vec![name],
            data_type: Some(DataType::Table(Some(columns))),
            assignment: None,
            declare_type: None,
            binary: None,
            sensitive: None,
            scroll: None,
            hold: None,
            for_query: None,
        }],
    })
}

/// A `DECLARE RECURSIVE VIEW` statement: the view's name and columns.
pub fn recursive_declaration(statement: &Statement) -> Option<(&Ident, &[ColumnDef])> {
    match statement {
        Statement::Declare { stmts } => match stmts.as_slice() {
            [Declare {
                names,
                data_type: Some(DataType::Table(Some(columns))),
                ..
            }] => match names.as_slice() {
                [name] => Some((name, columns.as_slice())),
                _ => None,
            },
            _ => None,
        },
        _ => None,
    }
}

/// `CREATE [OR REPLACE] FUNCTION name(arg type, …) RETURNS type [NOT NULL]
/// [AS expression]`, Feldera's form (sqlparser's generic dialect reads a
/// body only as a string).
fn parse_create_function(parser: &mut Parser) -> Result<Statement, ParserError> {
    parser.next_token();
    let or_replace = parser.parse_keywords(&[Keyword::OR, Keyword::REPLACE]);
    parser.expect_keyword(Keyword::FUNCTION)?;
    let name = parser.parse_object_name(false)?;
    parser.expect_token(&Token::LParen)?;
    let mut args = Vec::new();
    if !parser.consume_token(&Token::RParen) {
        loop {
            let arg_name = parser.parse_identifier()?;
            let data_type = parser.parse_data_type()?;
            args.push(OperateFunctionArg {
                mode: None,
                name: Some(arg_name),
                data_type,
                default_expr: None,
            });
            if parser.consume_token(&Token::RParen) {
                break;
            }
            parser.expect_token(&Token::Comma)?;
        }
    }
    parser.expect_keyword(Keyword::RETURNS)?;
    let return_type = parser.parse_data_type()?;
    let _ = parser.parse_keywords(&[Keyword::NOT, Keyword::NULL]);
    let function_body = if parser.parse_keyword(Keyword::AS) {
        Some(CreateFunctionBody::AsBeforeOptions {
            body: parser.parse_expr()?,
            link_symbol: None,
        })
    } else {
        None
    };
    Ok(Statement::CreateFunction(CreateFunction {
        or_alter: false,
        or_replace,
        temporary: false,
        if_not_exists: false,
        name,
        args: Some(args),
        return_type: Some(FunctionReturnType::DataType(return_type)),
        function_body,
        behavior: None,
        called_on_null: None,
        parallel: None,
        security: None,
        set_params: vec![],
        using: None,
        language: None,
        determinism_specifier: None,
        options: None,
        remote_connection: None,
    }))
}

/// Parses an expression that Eddy generated (a rewrite of the program's
/// own SQL), with its dialect; `what` names the rewrite in the error.
pub(crate) fn generated_expr(text: &str, what: &str) -> Result<Expr, crate::error::SqlError> {
    Parser::new(&EddyDialect)
        .try_with_sql(text)
        .and_then(|mut p| p.parse_expr())
        .map_err(|e| crate::error::SqlError::new(format!("{what}: {e}")))
}

/// The lateness a column declares (`ts TIMESTAMP LATENESS INTERVAL '4' SECOND`).
pub fn column_lateness(options: &[ColumnOptionDef]) -> Option<&Expr> {
    options.iter().find_map(|o| match &o.option {
        ColumnOption::Options(list) => list.iter().find_map(|s| match s {
            SqlOption::KeyValue { key, value } if key.value == LATENESS => Some(value),
            _ => None,
        }),
        _ => None,
    })
}

/// A `LATENESS view.column <expr>` statement: the column's name and the
/// lateness.
pub fn lateness_statement(statement: &Statement) -> Option<(&ObjectName, &Expr)> {
    match statement {
        Statement::Set(Set::SingleAssignment {
            hivevar: true,
            variable,
            values,
            ..
        }) => match values.as_slice() {
            [value] => Some((variable, value)),
            _ => None,
        },
        _ => None,
    }
}
