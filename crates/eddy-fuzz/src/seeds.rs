//! Seeds: the tables and queries of sqllogictest files, from the project's
//! `sql-tests/` and, when `EDDY_FUZZ_CORPUS` names one, a folder of them.

use std::path::{Path, PathBuf};

/// The statements of one sqllogictest file.
#[derive(Debug, Clone, Default)]
pub struct SeedFile {
    /// `CREATE TABLE` statements.
    pub tables: Vec<String>,
    /// Queries (and the SELECTs of views).
    pub queries: Vec<String>,
}

/// All seeds.
#[derive(Debug, Clone, Default)]
pub struct Seeds {
    /// One entry per file that has at least one table and one query.
    pub files: Vec<SeedFile>,
}

fn sql_tests_dir() -> PathBuf {
    // `cargo test` sets the variable at run time too; the run-time value
    // names this checkout even when the binary was built from another one
    // that shares the target folder.
    let dir = std::env::var("CARGO_MANIFEST_DIR").unwrap_or(env!("CARGO_MANIFEST_DIR").into());
    Path::new(&dir).join("../../sql-tests")
}

/// Splits sqllogictest text into its statements and queries.
pub fn parse_slt(text: &str) -> SeedFile {
    let mut file = SeedFile::default();
    let mut lines = text.lines().peekable();
    while let Some(line) = lines.next() {
        let line = line.trim_end();
        let is_query = line.starts_with("query");
        if !(is_query || line.starts_with("statement")) {
            continue;
        }
        let mut sql = String::new();
        while let Some(l) = lines.peek() {
            if l.trim().is_empty() || l.starts_with("----") {
                break;
            }
            sql.push_str(l);
            sql.push('\n');
            lines.next();
        }
        let sql = sql.trim().trim_end_matches(';').to_string();
        let upper = sql.to_ascii_uppercase();
        if upper.starts_with("CREATE TABLE") {
            file.tables.push(sql);
        } else if upper.starts_with("CREATE VIEW") || upper.starts_with("CREATE MATERIALIZED VIEW")
        {
            if let Some(pos) = upper.find(" AS ") {
                file.queries.push(sql[pos + 4..].to_string());
            }
        } else if is_query || upper.starts_with("SELECT") || upper.starts_with("WITH") {
            file.queries.push(sql);
        }
    }
    file
}

fn files_in(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut entries: Vec<PathBuf> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            files_in(&p, out);
        } else if matches!(p.extension().and_then(|e| e.to_str()), Some("slt" | "test")) {
            out.push(p);
        }
    }
}

impl Seeds {
    /// Loads `sql-tests/` and the corpus named by `EDDY_FUZZ_CORPUS`, at
    /// most `max_corpus_files` files of it.
    pub fn load(max_corpus_files: usize) -> Self {
        let mut paths = Vec::new();
        files_in(&sql_tests_dir(), &mut paths);
        assert!(
            !paths.is_empty(),
            "no seeds in {}",
            sql_tests_dir().display()
        );
        if let Ok(corpus) = std::env::var("EDDY_FUZZ_CORPUS") {
            let mut more = Vec::new();
            files_in(Path::new(&corpus), &mut more);
            paths.extend(more.into_iter().take(max_corpus_files));
        }
        let files = paths
            .iter()
            .filter_map(|p| std::fs::read_to_string(p).ok())
            .map(|t| parse_slt(&t))
            .filter(|f| !f.tables.is_empty() && !f.queries.is_empty())
            .collect();
        Self { files }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_project_sql_tests_are_seeds() {
        let seeds = Seeds::load(0);
        assert!(seeds.files.len() >= 5);
        let queries: usize = seeds.files.iter().map(|f| f.queries.len()).sum();
        assert!(queries > 100, "{queries}");
    }
}
