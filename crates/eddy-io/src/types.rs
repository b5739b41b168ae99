//! SQL's names for the Arrow types values are kept in, and Arrow's
//! errors about a row put in SQL's words: a user declared `BIGINT` and
//! `VARCHAR`, not `Int64` and `Utf8`.

/// The SQL name of a type DataFusion prints in Arrow's words.
pub fn sql_type_name(arrow: &str) -> String {
    let head = arrow.split(['(', '<']).next().unwrap_or(arrow).trim();
    let name = match head {
        "Boolean" => "BOOLEAN",
        "Int8" => "TINYINT",
        "Int16" => "SMALLINT",
        "Int32" => "INTEGER",
        "Int64" => "BIGINT",
        "UInt8" => "TINYINT UNSIGNED",
        "UInt16" => "SMALLINT UNSIGNED",
        "UInt32" => "INTEGER UNSIGNED",
        "UInt64" => "BIGINT UNSIGNED",
        "Float16" | "Float32" => "REAL",
        "Float64" => "DOUBLE",
        "Utf8" | "LargeUtf8" | "Utf8View" => "VARCHAR",
        // A VARIANT's Arrow type (see eddy_io::variant).
        "LargeBinary" => "VARIANT",
        "FixedSizeBinary" if arrow == "FixedSizeBinary(16)" => "UUID",
        "Binary" | "BinaryView" | "FixedSizeBinary" => "VARBINARY",
        "Date32" | "Date64" => "DATE",
        "Time32" | "Time64" => "TIME",
        "Timestamp" => "TIMESTAMP",
        "Interval" | "Duration" => "INTERVAL",
        "List" | "LargeList" | "FixedSizeList" | "ListView" => "ARRAY",
        "Struct" => "ROW",
        "Map" => "MAP",
        "Null" => "NULL",
        "Decimal32" | "Decimal64" | "Decimal128" | "Decimal256" => {
            return arrow.replacen(head, "DECIMAL", 1);
        }
        _ => return arrow.to_string(),
    };
    name.to_string()
}

/// A row error of Arrow's readers in SQL's words: `Json error: whilst
/// decoding field 'id': failed to parse "x" as Int64` becomes `column
/// 'id': failed to parse "x" as BIGINT`. A type is renamed only where the
/// reader names one (after " as "), never inside the value quoted.
pub fn row_error_in_sql_terms(message: &str) -> String {
    let mut m = message.trim();
    for prefix in ["Json error: ", "Parser error: ", "Cast error: "] {
        m = m.strip_prefix(prefix).unwrap_or(m);
    }
    let m = match m.strip_prefix("whilst decoding field '") {
        Some(rest) => match rest.split_once("': ") {
            Some((field, why)) => format!("column '{field}': {why}"),
            None => m.to_string(),
        },
        None => m.to_string(),
    };
    // The type after the last " as " (the value before it is quoted and
    // may hold anything).
    match m.rfind(" as ") {
        Some(i) => {
            let ty = &m[i + 4..];
            let sql = sql_type_name(ty);
            if sql == ty {
                m
            } else {
                format!("{} as {sql}", &m[..i])
            }
        }
        None => m,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn row_errors_speak_sql() {
        assert_eq!(
            row_error_in_sql_terms(
                "Json error: whilst decoding field 'id': failed to parse \"x as Int64\" as Int64"
            ),
            "column 'id': failed to parse \"x as Int64\" as BIGINT"
        );
        assert_eq!(
            row_error_in_sql_terms(
                "Json error: whilst decoding field 'd': failed to parse \"soon\" as Date32"
            ),
            "column 'd': failed to parse \"soon\" as DATE"
        );
        assert_eq!(
            row_error_in_sql_terms(
                "Parser error: can't parse the string value 1.2.3 to decimal as Decimal128(10, 2)"
            ),
            "can't parse the string value 1.2.3 to decimal as DECIMAL(10, 2)"
        );
        assert_eq!(
            row_error_in_sql_terms("expected a JSON array"),
            "expected a JSON array"
        );
        assert_eq!(sql_type_name("Utf8"), "VARCHAR");
    }
}
