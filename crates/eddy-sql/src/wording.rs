//! DataFusion's and sqlparser's messages in SQL's and Feldera's words:
//! the innermost reason of a chain, without the engine's layer prefixes,
//! SQL's type names for Arrow's, Feldera's wording for the refusals it has
//! words for, a function's arguments and signatures as SQL states them,
//! and the operators and names as the user wrote them. [`SqlError`]
//! applies these to every error it is made from.
//!
//! [`SqlError`]: crate::error::SqlError

use eddy_io::types::sql_type_name;

/// The innermost reason of a chain DataFusion prints as `rule\ncaused
/// by\nreason` (the name of an analyzer rule says nothing to the user).
pub(crate) fn innermost(message: &str) -> String {
    const CAUSED_BY: &str = "\ncaused by\n";
    match message.rfind(CAUSED_BY) {
        Some(at) => message[at + CAUSED_BY.len()..].to_string(),
        None => message.to_string(),
    }
}

/// DataFusion's other refusals of a program, in Feldera's words and SQL's
/// type names; other messages are kept.
pub(crate) fn in_sql_words(message: &str) -> String {
    const PLANNING: &str = "Error during planning: ";
    let m = message.strip_prefix(PLANNING).unwrap_or(message);
    const COMPARISON: &str = "Cannot infer common argument type for comparison operation ";
    if let Some(rest) = m.strip_prefix(COMPARISON) {
        for op in [
            " IS NOT DISTINCT FROM ",
            " IS DISTINCT FROM ",
            " <= ",
            " >= ",
            " <> ",
            " != ",
            " = ",
            " < ",
            " > ",
        ] {
            if let Some((l, r)) = split_outside_parentheses(rest, op) {
                let op = op.trim();
                return format!(
                    "Cannot apply '{op}' to arguments of type '<{}> {op} <{}>'",
                    sql_type_name(l.trim()),
                    sql_type_name(r.trim())
                );
            }
        }
    }
    // `GROUPING(e)` of an expression that is not grouped.
    if m.starts_with("Argument ") && m.contains(" to grouping function is not in grouping columns")
    {
        return format!("Argument to GROUPING operator must be a grouped expression: {m}");
    }
    // `VALUES (1), (1, 2)`.
    if m.starts_with("Inconsistent data length across values list") {
        return format!("Values passed to VALUES operator must have compatible types: {m}");
    }
    // `CASE m WHEN a …` whose operand and values cannot be compared.
    if let Some(rest) = m.strip_prefix("Failed to coerce case ") {
        if let Some((case, rest)) = split_outside_parentheses(rest, " and when ") {
            let case = case.trim().trim_start_matches('(');
            let case = case.strip_suffix(')').unwrap_or(case);
            let when = rest.split_once(" to common types").map_or(rest, |(w, _)| w);
            let when = when.trim().trim_start_matches('(');
            let when = when.strip_suffix(')').unwrap_or(when);
            let when = top_level(when).first().copied().unwrap_or(when);
            return format!(
                "Cannot apply '=' to arguments of type '<{}> = <{}>'",
                sql_type_name(case.trim()),
                sql_type_name(when.trim())
            );
        }
    }
    // `a || b` of values that are no strings.
    if let Some(rest) =
        m.strip_prefix("Cannot infer common string type for string concat operation ")
    {
        if let Some((l, r)) = split_outside_parentheses(rest, " || ") {
            return format!(
                "Cannot apply '||' to arguments of type '<{}> || <{}>'",
                sql_type_name(l.trim()),
                sql_type_name(r.trim())
            );
        }
    }
    // An index into a value that has no items (`bin[2]`, `bin['a']`).
    if let Some(rest) = m.strip_prefix("Execution error: Cannot access field at argument 1: type ")
    {
        if let Some((t, _)) = rest.split_once(" is not ") {
            return format!(
                "Cannot apply indexing to arguments of type '<{}>'",
                sql_type_name(t.trim())
            );
        }
    }
    if let Some(rest) = m.strip_prefix("Can not find compatible types to compare ") {
        let types = rest.split_once(" with [").map(|(value, list)| {
            let list = list.strip_suffix(']').unwrap_or(list);
            let mut list: Vec<String> = top_level(list).iter().map(|t| sql_type_name(t)).collect();
            list.dedup();
            format!("{} and {}", sql_type_name(value.trim()), list.join(", "))
        });
        return format!(
            "Values passed to IN operator must have compatible types: {}",
            types.unwrap_or_else(|| rest.to_string())
        );
    }
    if let Some(rest) = m.strip_prefix("[IGNORE | RESPECT] NULLS are not permitted for ") {
        return format!(
            "Cannot specify IGNORE NULLS or RESPECT NULLS following '{}'",
            rest.trim().to_uppercase()
        );
    }
    if let Some(rest) = m.strip_prefix("Aggregate function calls cannot be nested") {
        return format!("Aggregate expressions cannot be nested{rest}");
    }
    if let Some(rest) = m.strip_prefix("Schema error: No field named ") {
        // The list of every field (`\nValid fields are …`) names columns
        // by DataFusion's qualifiers; the hint before it is enough.
        let rest = rest
            .split("Valid fields are")
            .next()
            .unwrap_or(rest)
            .trim_end();
        let (name, hint) = rest
            .split_once(". ")
            .unwrap_or((rest.trim_end_matches('.'), ""));
        let hint = hint
            .split_once("Valid fields are")
            .map_or(hint, |(h, _)| h)
            .trim();
        let hint = if hint.is_empty() {
            String::new()
        } else {
            format!(". {}", hint.trim_end_matches('.'))
        };
        if !name
            .chars()
            .all(|c| c.is_alphanumeric() || c == '_' || c == '.' || c == '"')
        {
            return message.to_string();
        }
        let name = name.trim_matches('"');
        return match name.rsplit_once('.') {
            Some((table, column)) => format!(
                "Column '{}' not found in table '{}'{hint}",
                column.trim_matches('"'),
                table.trim_matches('"')
            ),
            None => format!("Column '{name}' not found in any table{hint}"),
        };
    }
    if let Some(t) = refused_in_sql_words(m) {
        return t;
    }
    without_engine_prefix(m).to_string()
}

/// The words DataFusion opens a message with to say which of its layers
/// refused it, which say nothing to the user.
fn without_engine_prefix(message: &str) -> &str {
    let mut m = message;
    loop {
        let before = m;
        for prefix in [
            "Error during planning: ",
            "Schema error: ",
            "Arrow error: ",
            "Execution error: ",
            "Cast error: ",
            "This feature is not implemented: ",
        ] {
            m = m.strip_prefix(prefix).unwrap_or(m);
        }
        if m == before {
            return m;
        }
    }
}

/// Further refusals of DataFusion's planner, in the words of SQL (and of
/// Feldera's compiler, where it has words for them).
fn refused_in_sql_words(m: &str) -> Option<String> {
    let m = without_engine_prefix(m);
    // A table or view that is not there (`table or view` is Eddy's own
    // planner; `table 'datafusion.public.x'` DataFusion's).
    for prefix in ["table or view '", "table '"] {
        if let Some(name) = m
            .strip_prefix(prefix)
            .and_then(|r| r.strip_suffix("' not found"))
        {
            let name = name
                .strip_prefix("datafusion.public.")
                .or_else(|| name.strip_prefix("public."))
                .unwrap_or(name);
            return Some(format!("Object '{name}' not found"));
        }
    }
    // `a + b` of types no arithmetic takes.
    if let Some(rest) = m.strip_prefix("Cannot coerce arithmetic expression ") {
        let rest = rest.strip_suffix(" to valid types").unwrap_or(rest);
        for op in [" + ", " - ", " * ", " / ", " % "] {
            if let Some((l, r)) = split_outside_parentheses(rest, op) {
                let op = op.trim();
                return Some(format!(
                    "Cannot apply '{op}' to arguments of type '<{}> {op} <{}>'",
                    sql_type_name(l.trim()),
                    sql_type_name(r.trim())
                ));
            }
        }
    }
    // A text literal that is no value of the type it is compared with or
    // cast to; the type is named without the precision DataFusion chose.
    if let Some(rest) = m.strip_prefix("Cannot cast string '") {
        if let Some((value, rest)) = rest.split_once("' to value of ") {
            let t = rest.strip_suffix(" type").unwrap_or(rest);
            let t = sql_type_name(t);
            let t = t.split('(').next().unwrap_or(&t).trim();
            return Some(format!("Cannot convert '{value}' to {t}"));
        }
    }
    // A column neither grouped nor aggregated.
    if m.starts_with("Column in SELECT must be in GROUP BY or an aggregate function") {
        let (_, rest) = m.split_once("column \"")?;
        let (column, _) = rest.split_once('"')?;
        let column = column.rsplit('.').next().unwrap_or(column);
        return Some(format!("Expression '{column}' is not being grouped"));
    }
    if let Some(field) = m.strip_prefix("Ambiguous reference to unqualified field ") {
        return Some(format!("Column '{}' is ambiguous", field.trim()));
    }
    // A call of a function no catalog has: a window function called
    // without OVER, or a name that is not a function.
    if let Some(rest) = m.strip_prefix("Invalid function '") {
        let (name, after) = rest.split_once('\'')?;
        const WINDOW: [&str; 11] = [
            "row_number",
            "rank",
            "dense_rank",
            "percent_rank",
            "cume_dist",
            "ntile",
            "lag",
            "lead",
            "first_value",
            "last_value",
            "nth_value",
        ];
        if WINDOW.contains(&name.to_lowercase().as_str()) {
            return Some(format!(
                "Window function '{}' needs an OVER clause",
                name.to_uppercase()
            ));
        }
        // DataFusion names the closest function however far it is; a
        // suggestion is only worth reading when it looks like a misspelling.
        let hint = after
            .split_once("Did you mean ")
            .map(|(_, h)| h.trim().trim_end_matches('.'))
            .filter(|h| looks_misspelt(name, h.trim_matches(['\'', '?'])))
            .map(|h| format!(". Did you mean {h}"))
            .unwrap_or_default();
        return Some(format!("No function named '{name}'{hint}"));
    }
    if let Some(rest) = m.strip_prefix("Failed to coerce then (") {
        // `CASE … THEN a ELSE b` of types that do not mix.
        let (then_types, rest) = rest.split_once(") and else (")?;
        let else_type = rest
            .split_once(") to common types")
            .map_or(rest, |(e, _)| e);
        let mut types: Vec<String> = top_level(then_types.trim_matches(['[', ']']))
            .iter()
            .chain([else_type].iter())
            .map(|t| sql_type_name(t))
            .collect();
        types.dedup();
        return Some(format!(
            "Illegal mixing of types in CASE or COALESCE statement: {}",
            types.join(", ")
        ));
    }
    if let Some(rest) = m.strip_prefix("There isn't a common type to coerce ") {
        let (types, op) = rest.split_once(" in ")?;
        let (l, r) = split_outside_parentheses(types, " and ")?;
        let op = op.strip_suffix(" expression").unwrap_or(op).trim();
        return Some(format!(
            "Cannot apply '{op}' to arguments of type '<{}> {op} <{}>'",
            sql_type_name(l.trim()),
            sql_type_name(r.trim())
        ));
    }
    if let Some(rest) = m.strip_prefix("Cannot create filter with non-boolean predicate '") {
        let (_, t) = rest.rsplit_once("' returning ")?;
        return Some(format!(
            "WHERE clause must be a condition, not a {}",
            sql_type_name(t.trim())
        ));
    }
    if let Some(rest) =
        m.strip_prefix("Too many columns! The subquery should only return one column: ")
    {
        let n = top_level(rest).len();
        return Some(format!(
            "A scalar subquery must select exactly one column, and this one selects {n}"
        ));
    }
    if let Some(t) = m.strip_prefix("Unsupported SQL type ") {
        return Some(format!("Unknown type '{}'", t.trim()));
    }
    None
}

/// `text` split at the first `sep` outside parentheses and quotes.
/// Whether `written` is close enough to `known` to be a misspelling of it:
/// at most a third of its letters (and at least one) changed.
fn looks_misspelt(written: &str, known: &str) -> bool {
    let distance = datafusion::common::utils::datafusion_strsim::levenshtein(
        &written.to_lowercase(),
        &known.to_lowercase(),
    );
    distance <= (written.chars().count() / 3).max(1)
}

fn split_outside_parentheses<'a>(text: &'a str, sep: &str) -> Option<(&'a str, &'a str)> {
    let (mut depth, mut quoted) = (0i32, false);
    for (i, c) in text.char_indices() {
        match c {
            '"' => quoted = !quoted,
            '(' | '<' | '[' if !quoted => depth += 1,
            ')' | '>' | ']' if !quoted => depth -= 1,
            _ => {}
        }
        if depth == 0 && !quoted && text[i..].starts_with(sep) {
            return Some((&text[..i], &text[i + sep.len()..]));
        }
    }
    None
}

/// DataFusion's refusal of a call's argument types, in Feldera's words and
/// SQL's type names: `No function matches the given name and argument
/// types 'avg(Boolean)'. … Candidate functions: avg(Float64)` becomes
/// `Cannot apply 'AVG' to arguments of type 'AVG(<BOOLEAN>)'. Supported
/// form(s): 'AVG(<DOUBLE>)'`. Other messages are kept.
pub(crate) fn signature_in_sql_words(message: &str) -> String {
    const NO_MATCH: &str = "No function matches the given name and argument types '";
    if let Some(at) = message.find(NO_MATCH) {
        // A function that says why in Feldera's words (`Cannot apply
        // 'PRECEDES' to …`, `VARCHAR is not comparable to INTEGER`).
        const CANNOT: &str = "Cannot apply '";
        if let Some(start) = message[..at].find(CANNOT) {
            return message[start..at]
                .trim_end()
                .trim_end_matches('.')
                .to_string();
        }
        const INCOMPARABLE: &str = " is not comparable to ";
        if let Some(i) = message[..at].find(INCOMPARABLE) {
            let start = message[..i].rfind(": ").map_or(0, |s| s + 2);
            let end = message[i..at].find('.').map_or(at, |e| i + e);
            return message[start..end].to_string();
        }
        if let Some(arity) = arity_in_sql_words(&message[..at]) {
            return arity;
        }
        let rest = &message[at + NO_MATCH.len()..];
        if let Some((call, candidates)) = rest.split_once("'.") {
            if let Some((name, args)) = call.split_once('(') {
                let args = args.strip_suffix(')').unwrap_or(args);
                let name = name.to_uppercase();
                let types = |list: &str| {
                    top_level(list)
                        .iter()
                        .map(|t| format!("<{}>", sql_type_name(t)))
                        .collect::<Vec<_>>()
                        .join(", ")
                };
                // A function that takes no arguments has the form
                // `f(NullAry())`.
                let lists: Vec<&str> = candidates
                    .lines()
                    .map(str::trim)
                    .filter_map(|l| l.split_once('('))
                    .map(|(_, a)| a.strip_suffix(')').unwrap_or(a))
                    .map(|a| if a == "NullAry()" { "" } else { a })
                    .collect();
                let count = |a: &str| if a.is_empty() { 0 } else { top_level(a).len() };
                if let Some(why) =
                    crate::sametype::refused_call(&name.to_lowercase(), &top_level(args))
                {
                    return why;
                }
                if let Some(expecting) = requires_only(&message[..at]) {
                    return format!(
                        "Invalid number of arguments to function '{name}'. Was expecting \
                         {expecting} arguments"
                    );
                }
                // Every form takes the same number of arguments, another
                // number than the call has: say so.
                let fixed = |a: &&str| {
                    a.is_empty()
                        || top_level(a)
                            .iter()
                            .all(|t| !t.is_empty() && sql_type_name(t) != *t)
                };
                if let Some(first) = lists.first() {
                    let n = count(first);
                    if lists.iter().all(fixed)
                        && lists.iter().all(|a| count(a) == n)
                        && count(args) != n
                    {
                        return format!(
                            "Invalid number of arguments to function '{name}'. Was expecting \
                             {n} arguments"
                        );
                    }
                }
                // `a[i]` is planned as ARRAY_ELEMENT.
                if name == "ARRAY_ELEMENT" {
                    let (a, i) = top_level(args)
                        .split_first()
                        .map(|(a, i)| (sql_type_name(a), i.join(", ")))
                        .unwrap_or_default();
                    return format!(
                        "Cannot apply indexing to arguments of type '<{a}>[<{}>]'",
                        sql_type_name(&i)
                    );
                }
                let forms: Vec<String> = lists
                    .iter()
                    .map(|a| format!("'{name}({})'", types(a)))
                    .collect();
                // A function that checks its arguments itself has no form
                // to show.
                if lists.iter().any(|a| a.contains("UserDefined")) {
                    return format!(
                        "Cannot apply '{name}' to arguments of type '{name}({})'",
                        types(args)
                    );
                }
                return format!(
                    "Cannot apply '{name}' to arguments of type '{name}({})'. Supported form(s): {}",
                    types(args),
                    forms.join(", ")
                );
            }
        }
    }
    // Coercion refused before any form is tried: `Failed to coerce
    // arguments to satisfy a call to 'f' function: coercion from Utf8,
    // Utf8 to the signature … failed`.
    const NO_COERCION: &str = "Failed to coerce arguments to satisfy a call to '";
    if let Some(at) = message.find(NO_COERCION) {
        let rest = &message[at + NO_COERCION.len()..];
        if let Some((name, rest)) = rest.split_once("' function: coercion from ") {
            if let Some((args, _)) = rest.split_once(" to the signature") {
                if let Some(why) = crate::sametype::refused_call(name, &top_level(args)) {
                    return why;
                }
                let name = name.to_uppercase();
                let types: Vec<String> = top_level(args)
                    .iter()
                    .map(|t| format!("<{}>", sql_type_name(t)))
                    .collect();
                return format!(
                    "Cannot apply '{name}' to arguments of type '{name}({})'",
                    types.join(", ")
                );
            }
        }
    }
    const NO_SIGNATURE: &str = "Function '";
    if let Some(at) = message.find(NO_SIGNATURE) {
        let rest = &message[at + NO_SIGNATURE.len()..];
        if let Some((name, why)) = rest.split_once("' failed to match any signature, errors: ") {
            return format!(
                "Cannot apply '{}' to arguments of these types: {why}",
                name.to_uppercase()
            );
        }
    }
    message.to_string()
}

/// The number of arguments a function that checks its arguments itself
/// says it takes: DataFusion's `MIN` and `MAX` say `min/max was called
/// with 2 arguments. It requires only 1.`
fn requires_only(reason: &str) -> Option<usize> {
    const ONLY: &str = " arguments. It requires only ";
    let (before, after) = reason.split_once(ONLY)?;
    before.rsplit_once("was called with ")?;
    after
        .split(|c: char| !c.is_ascii_digit())
        .next()?
        .parse()
        .ok()
}

/// A call with the wrong number of arguments, in Feldera's words
/// (`Invalid number of arguments to function 'MAX'. Was expecting 1
/// arguments`), from the reason DataFusion gives before its list of
/// signatures: Eddy's own aggregates say it so already, DataFusion's
/// functions say `Function 'f' expects 1 arguments but received 2`.
fn arity_in_sql_words(reason: &str) -> Option<String> {
    const FELDERA: &str = "Invalid number of arguments to function '";
    // One reason per form of the function: no one of them is the reason.
    if reason.contains("failed to match any signature") {
        return None;
    }
    if let Some(at) = reason.find(FELDERA) {
        let sentence = &reason[at..];
        let expecting = sentence.find("Was expecting ")?;
        let end = sentence[expecting..]
            .find(" arguments")
            .map(|e| expecting + e + " arguments".len())?;
        return Some(sentence[..end].to_string());
    }
    for (opening, verb) in [
        ("Function '", "' expects "),
        ("The function '", "' expected "),
    ] {
        for (at, _) in reason.match_indices(opening) {
            let rest = &reason[at + opening.len()..];
            let Some((name, after)) = rest.split_once(verb) else {
                continue;
            };
            let Some((count, _)) = after.split_once(' ') else {
                continue;
            };
            if name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                && count.parse::<usize>().is_ok()
                && (after.starts_with(&format!("{count} arguments but received"))
                    || after.starts_with(&format!("{count} argument(s) but received")))
            {
                return Some(format!(
                    "Invalid number of arguments to function '{}'. Was expecting {count} \
                     arguments",
                    name.to_uppercase()
                ));
            }
        }
    }
    None
}

/// A message about a function the user called by another name (an alias,
/// or a Feldera spelling Eddy rewrites: `EVERY` is `bool_and`, `LEN` is
/// `character_length`) names it as the user did. `names` pairs each such
/// name with the function's own; `text` is the query as written. Only a
/// function the text calls by exactly one such name, and never by its own,
/// is renamed.
pub fn respelled(message: &str, text: &str, names: &[(String, String)]) -> String {
    let Some(at) = message.find("'") else {
        return message.to_string();
    };
    let quoted = &message[at + 1..];
    let end = quoted.find(['\'', '(']).unwrap_or(quoted.len());
    let own = &quoted[..end];
    if own.is_empty() || !own.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
        return message.to_string();
    }
    let text = text.to_lowercase();
    let lower = own.to_lowercase();
    if calls(&text, &lower) {
        return message.to_string();
    }
    let mut written: Vec<&str> = names
        .iter()
        .filter(|(alias, name)| *name == lower && calls(&text, alias))
        .map(|(alias, _)| alias.as_str())
        .collect();
    written.sort_unstable();
    written.dedup();
    match written.as_slice() {
        [alias] => {
            let alias = alias.to_uppercase();
            message
                .replace(&format!("'{own}'"), &format!("'{alias}'"))
                .replace(&format!("'{own}("), &format!("'{alias}("))
        }
        _ => message.to_string(),
    }
}

/// A refused comparison named by the operator the query wrote, where
/// DataFusion names another: `IS [NOT] TRUE`, `FALSE` and `UNKNOWN` are
/// planned as `IS [NOT] DISTINCT FROM` a BOOLEAN, `<=>` as `IS NOT DISTINCT
/// FROM`, `<>` is printed `!=`, and a refused `BETWEEN` is an internal
/// error in DataFusion's words. `text` is the query as written (one
/// statement); an operator the text does not write alone is left as it is.
pub fn operators_as_written(message: &str, text: &str) -> String {
    let lower = text.to_lowercase();
    let writes = |op: &str| lower.contains(op);
    const DISTINCT: &str = "Cannot apply 'IS DISTINCT FROM' to arguments of type '<";
    const NOT_DISTINCT: &str = "Cannot apply 'IS NOT DISTINCT FROM' to arguments of type '<";
    let operand = |rest: &str| rest.split_once('>').map(|(t, _)| t.to_string());
    if let Some(rest) = message
        .strip_prefix(DISTINCT)
        .or_else(|| message.strip_prefix(NOT_DISTINCT))
    {
        if !writes("distinct from") {
            let tests = [
                "is not unknown",
                "is unknown",
                "is not true",
                "is not false",
                "is true",
                "is false",
            ];
            let written: Vec<&str> = tests.iter().copied().filter(|t| writes(t)).collect();
            // No form is part of another: at most one is written.
            let test = match written.as_slice() {
                [one] => Some(*one),
                _ => None,
            };
            if let (Some(test), Some(t)) = (test, operand(rest)) {
                let test = test.to_uppercase();
                return format!(
                    "Cannot apply '{test}' to arguments of type '<{t}> {test}'. Supported \
                     form(s): '<BOOLEAN> {test}'"
                );
            }
            if message.starts_with(NOT_DISTINCT) && writes("<=>") {
                return message.replace("IS NOT DISTINCT FROM", "<=>");
            }
        }
    }
    const IN: &str = "Values passed to IN operator";
    if message.starts_with(IN) && writes("not in") {
        let plain = lower
            .match_indices(" in ")
            .any(|(at, _)| !lower[..at].trim_end().ends_with("not"));
        if !plain {
            return message.replacen(IN, "Values passed to NOT IN operator", 1);
        }
    }
    if message.starts_with("Cannot apply '!='") && writes("<>") && !writes("!=") {
        return message.replace("!=", "<>");
    }
    const BETWEEN: &str = "Internal error: Failed to coerce types ";
    if let Some(rest) = message.strip_prefix(BETWEEN) {
        if let Some((types, _)) = rest.split_once(" in BETWEEN expression") {
            if let Some((l, r)) = split_outside_parentheses(types, " and ") {
                let symmetric = writes(&crate::dialect::SYMMETRIC_MARKER.to_lowercase());
                let op = match (writes("not between"), symmetric) {
                    (false, false) => "BETWEEN ASYMMETRIC",
                    (false, true) => "BETWEEN SYMMETRIC",
                    (true, false) => "NOT BETWEEN ASYMMETRIC",
                    (true, true) => "NOT BETWEEN SYMMETRIC",
                };
                return format!(
                    "Cannot apply '{op}' to arguments of type '<{}> {op} <{}>'",
                    sql_type_name(l.trim()),
                    sql_type_name(r.trim())
                );
            }
        }
    }
    message.to_string()
}

/// Whether `text` (lowercase) calls `name`: the word followed by `(`.
fn calls(text: &str, name: &str) -> bool {
    let word = |c: char| c.is_ascii_alphanumeric() || c == '_';
    text.match_indices(name).any(|(i, _)| {
        let before = text[..i].chars().next_back();
        let after = text[i + name.len()..].trim_start();
        !before.is_some_and(word) && after.starts_with('(')
    })
}

/// The items of a comma-separated list of types, split where no
/// parentheses or quotes enclose the comma.
fn top_level(list: &str) -> Vec<&str> {
    let (mut depth, mut quoted, mut start, mut out) = (0i32, false, 0, Vec::new());
    for (i, c) in list.char_indices() {
        match c {
            '"' => quoted = !quoted,
            '(' | '<' | '[' if !quoted => depth += 1,
            ')' | '>' | ']' if !quoted => depth -= 1,
            ',' if depth == 0 && !quoted => {
                out.push(list[start..i].trim());
                start = i + 1;
            }
            _ => {}
        }
    }
    if !list[start..].trim().is_empty() {
        out.push(list[start..].trim());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refused_comparisons_are_named_as_written() {
        let m = "Cannot apply 'IS DISTINCT FROM' to arguments of type '<ROW> IS DISTINCT FROM <BOOLEAN>'";
        assert_eq!(
            operators_as_written(m, "SELECT r IS NOT TRUE FROM t"),
            "Cannot apply 'IS NOT TRUE' to arguments of type '<ROW> IS NOT TRUE'. Supported \
             form(s): '<BOOLEAN> IS NOT TRUE'"
        );
        assert_eq!(
            operators_as_written(m, "SELECT r IS DISTINCT FROM b FROM t"),
            m
        );
        let m = "Cannot apply 'IS NOT DISTINCT FROM' to arguments of type '<MAP> IS NOT DISTINCT FROM <ARRAY>'";
        assert_eq!(
            operators_as_written(m, "SELECT m <=> a FROM t"),
            "Cannot apply '<=>' to arguments of type '<MAP> <=> <ARRAY>'"
        );
        let m = "Cannot apply '!=' to arguments of type '<MAP> != <ARRAY>'";
        assert_eq!(
            operators_as_written(m, "SELECT m <> a FROM t"),
            "Cannot apply '<>' to arguments of type '<MAP> <> <ARRAY>'"
        );
        let m =
            "Internal error: Failed to coerce types Struct(\"i1\": Int32) and Float64 in BETWEEN \
                 expression.\nThis issue was likely caused by a bug";
        assert_eq!(
            operators_as_written(m, "SELECT r NOT BETWEEN 1 AND 2 FROM t"),
            "Cannot apply 'NOT BETWEEN ASYMMETRIC' to arguments of type '<ROW> NOT BETWEEN \
             ASYMMETRIC <DOUBLE>'"
        );
    }

    #[test]
    fn a_refused_signature_is_said_in_sql_words() {
        let df = "Error during planning: No function matches the given name and argument types \
                  'avg(Boolean)'. You might need to add explicit type casts.\n\tCandidate \
                  functions:\n\tavg(Float64)";
        assert_eq!(
            signature_in_sql_words(df),
            "Cannot apply 'AVG' to arguments of type 'AVG(<BOOLEAN>)'. \
             Supported form(s): 'AVG(<DOUBLE>)'"
        );
        let two = "No function matches the given name and argument types \
                   'f(Struct(\"a\": Int32, \"b\": Utf8), Decimal128(6, 2))'. x\n\tCandidate \
                   functions:\n\tf(Int32, Int32)";
        assert!(
            signature_in_sql_words(two).contains("'F(<ROW>, <DECIMAL(6, 2)>)'"),
            "{}",
            signature_in_sql_words(two)
        );
        assert_eq!(
            signature_in_sql_words("table 't' not found"),
            "table 't' not found"
        );
    }

    #[test]
    fn a_wrong_number_of_arguments_is_said_in_feldera_words() {
        let df = "Error during planning: Function 'bool_and' expects 1 arguments but received \
                  2. No function matches the given name and argument types \
                  'bool_and(Boolean, Boolean)'. x\n\tCandidate functions:\n\tbool_and(Boolean)";
        assert_eq!(
            signature_in_sql_words(df),
            "Invalid number of arguments to function 'BOOL_AND'. Was expecting 1 arguments"
        );
        let forms = "Error during planning: No function matches the given name and argument \
                     types 'bool_and(Boolean, Boolean)'. x\n\tCandidate functions:\n\t\
                     bool_and(Boolean)";
        assert_eq!(
            signature_in_sql_words(forms),
            "Invalid number of arguments to function 'BOOL_AND'. Was expecting 1 arguments"
        );
        let own = "Error during planning: Invalid number of arguments to function 'ARG_MAX'. \
                   Was expecting 2 arguments. No function matches the given name and argument \
                   types 'arg_max(Int32)'. x\n\tCandidate functions:\n\targ_max(UserDefined)";
        assert_eq!(
            signature_in_sql_words(own),
            "Invalid number of arguments to function 'ARG_MAX'. Was expecting 2 arguments"
        );
        let min_max = "Error during planning: Execution error: min/max was called with 2 \
                       arguments. It requires only 1.. No function matches the given name and \
                       argument types 'max(Utf8, Utf8)'. x\n\tCandidate functions:\n\t\
                       max(UserDefined)";
        assert_eq!(
            signature_in_sql_words(min_max),
            "Invalid number of arguments to function 'MAX'. Was expecting 1 arguments"
        );
        let nullary = "Error during planning: No function matches the given name and argument \
                       types 'connector_metadata(Utf8)'. x\n\tCandidate functions:\n\t\
                       connector_metadata(NullAry())";
        assert_eq!(
            signature_in_sql_words(nullary),
            "Invalid number of arguments to function 'CONNECTOR_METADATA'. Was expecting 0 \
             arguments"
        );
    }

    #[test]
    fn other_refusals_are_said_in_sql_words() {
        let chain = "type_coercion\ncaused by\nError during planning: Cannot infer common \
                     argument type for comparison operation Map(\"entries\": non-null \
                     Struct(\"key\": non-null Utf8, \"value\": Int32), unsorted) = List(Int64)";
        assert_eq!(
            in_sql_words(&innermost(chain)),
            "Cannot apply '=' to arguments of type '<MAP> = <ARRAY>'"
        );
        assert_eq!(
            in_sql_words(
                "Error during planning: Cannot infer common argument type for comparison \
                 operation Float64 IS DISTINCT FROM Binary"
            ),
            "Cannot apply 'IS DISTINCT FROM' to arguments of type \
             '<DOUBLE> IS DISTINCT FROM <VARBINARY>'"
        );
        assert_eq!(
            in_sql_words(
                "Schema error: No field named illegal_tbl.foo. Did you mean \
                 'illegal_tbl.booll'?. Valid fields are illegal_tbl.id, illegal_tbl.booll."
            ),
            "Column 'foo' not found in table 'illegal_tbl'. Did you mean 'illegal_tbl.booll'?"
        );
        assert_eq!(
            in_sql_words("Schema error: No field named foo."),
            "Column 'foo' not found in any table"
        );
        assert_eq!(
            in_sql_words(
                "Error during planning: [IGNORE | RESPECT] NULLS are not permitted for sum"
            ),
            "Cannot specify IGNORE NULLS or RESPECT NULLS following 'SUM'"
        );
        assert_eq!(
            in_sql_words("Error during planning: table 'datafusion.public.by_town' not found"),
            "Object 'by_town' not found"
        );
    }

    #[test]
    fn a_refused_coercion_names_the_argument_types() {
        let df = "Error during planning: Failed to coerce arguments to satisfy a call to \
                  'array_position' function: coercion from Utf8, Utf8 to the signature \
                  OneOf([ArraySignature(Array), ArraySignature(Array)]) failed";
        assert_eq!(
            signature_in_sql_words(df),
            "Cannot apply 'ARRAY_POSITION' to arguments of type \
             'ARRAY_POSITION(<VARCHAR>, <VARCHAR>)'"
        );
    }

    #[test]
    fn a_function_called_by_another_name_is_named_as_called() {
        let names = vec![
            ("every".to_string(), "bool_and".to_string()),
            ("len".to_string(), "character_length".to_string()),
        ];
        let m = "Cannot apply 'BOOL_AND' to arguments of type 'BOOL_AND(<INTEGER>)'. \
                 Supported form(s): 'BOOL_AND(<BOOLEAN>)'";
        assert_eq!(
            respelled(m, "SELECT EVERY (x) FROM t", &names),
            "Cannot apply 'EVERY' to arguments of type 'EVERY(<INTEGER>)'. \
             Supported form(s): 'EVERY(<BOOLEAN>)'"
        );
        // Called by its own name too, or not by the other: left as it is.
        assert_eq!(
            respelled(m, "SELECT every(x), bool_and(y) FROM t", &names),
            m
        );
        assert_eq!(respelled(m, "SELECT everyone(x) FROM t", &names), m);
    }
}
