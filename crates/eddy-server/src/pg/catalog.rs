//! Enough of PostgreSQL's `pg_catalog` for `psql`'s `\dt`, `\dv`, `\d name`
//! and a BI tool's schema browser: the pipeline's tables (`relkind 'r'`)
//! and materialized views (`'v'`: only their rows are kept) in schema
//! `public`, their columns and types, with the
//! functions those catalog queries call (`functions.rs`). DataFusion's own
//! `information_schema` lists the same relations.
//!
//! Everything here is in memory, built per query from the pipeline's
//! schemas: read-only tables registered into the ad-hoc query's session
//! through [`SessionExtras`], so catalog queries run through the same
//! checked path as any other.

use std::sync::Arc;

use datafusion::arrow::array::{
    new_null_array, Array, ArrayRef, BooleanArray, Float32Array, Int16Array, Int32Array,
    RecordBatch, StringArray,
};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::catalog::MemorySchemaProvider;
use datafusion::datasource::MemTable;
use datafusion::error::Result;
use datafusion::prelude::{SessionConfig, SessionContext};
use pgwire::api::Type;

use super::encode::{pg_type, type_modifier};
use crate::query::SessionExtras;

/// Oid of schema `pg_catalog`.
const PG_CATALOG: i32 = 11;
/// Oid of schema `public`.
const PUBLIC: i32 = 2200;
/// Oid of schema `information_schema`.
const INFORMATION_SCHEMA: i32 = 13_000;
/// Oid of the first relation of a pipeline.
const FIRST_RELATION: i32 = 16_384;

/// A table or view of a pipeline, as the catalog shows it.
#[derive(Debug, Clone)]
pub struct Relation {
    /// Its name.
    pub name: String,
    /// Its columns.
    pub schema: SchemaRef,
    /// A view (otherwise a table).
    pub view: bool,
}

/// The catalog of one pipeline (the session's database).
#[derive(Debug)]
pub struct Catalog {
    /// The pipeline's name: the database.
    pub database: String,
    /// Its tables and views, in order (oids follow it).
    pub relations: Vec<Relation>,
}

impl SessionExtras for Catalog {
    fn configure(&self, config: SessionConfig) -> SessionConfig {
        config.with_default_catalog_and_schema(self.database.clone(), "public")
    }

    fn register(&self, ctx: &SessionContext) -> Result<()> {
        let schema = Arc::new(MemorySchemaProvider::new());
        for (name, batch) in self.tables()? {
            let table = MemTable::try_new(batch.schema(), vec![vec![batch]])?;
            datafusion::catalog::SchemaProvider::register_table(
                schema.as_ref(),
                name.to_string(),
                Arc::new(table),
            )?;
        }
        let catalog = ctx
            .catalog(&self.database)
            .ok_or_else(|| datafusion::error::DataFusionError::Internal("no catalog".into()))?;
        catalog.register_schema("pg_catalog", schema)?;
        for f in super::functions::functions(&self.database) {
            ctx.register_udf(f);
        }
        Ok(())
    }
}

/// Builds one catalog table from named columns.
fn table(columns: Vec<(&str, ArrayRef)>) -> Result<RecordBatch> {
    let fields: Vec<Field> = columns
        .iter()
        .map(|(n, a)| Field::new(*n, a.data_type().clone(), true))
        .collect();
    Ok(RecordBatch::try_new(
        Arc::new(Schema::new(fields)),
        columns.into_iter().map(|(_, a)| a).collect(),
    )?)
}

/// An empty catalog table with the given columns.
fn empty(columns: &[(&str, DataType)]) -> Result<RecordBatch> {
    table(
        columns
            .iter()
            .map(|(n, t)| (*n, new_null_array(t, 0)))
            .collect(),
    )
}

fn ints(v: impl IntoIterator<Item = i32>) -> ArrayRef {
    Arc::new(Int32Array::from_iter_values(v))
}

fn smallints(v: impl IntoIterator<Item = i16>) -> ArrayRef {
    Arc::new(Int16Array::from_iter_values(v))
}

fn texts<S: AsRef<str>>(v: impl IntoIterator<Item = S>) -> ArrayRef {
    Arc::new(StringArray::from_iter_values(v))
}

fn bools(v: impl IntoIterator<Item = bool>) -> ArrayRef {
    Arc::new(BooleanArray::from_iter(v.into_iter().map(Some)))
}

fn nulls(t: &DataType, n: usize) -> ArrayRef {
    new_null_array(t, n)
}

/// The types the door uses, with `pg_type`'s columns.
const TYPES: &[(&Type, &str, i16, &str)] = &[
    (&Type::BOOL, "bool", 1, "B"),
    (&Type::INT2, "int2", 2, "N"),
    (&Type::INT4, "int4", 4, "N"),
    (&Type::INT8, "int8", 8, "N"),
    (&Type::FLOAT4, "float4", 4, "N"),
    (&Type::FLOAT8, "float8", 8, "N"),
    (&Type::NUMERIC, "numeric", -1, "N"),
    (&Type::TEXT, "text", -1, "S"),
    (&Type::VARCHAR, "varchar", -1, "S"),
    (&Type::BYTEA, "bytea", -1, "U"),
    (&Type::DATE, "date", 4, "D"),
    (&Type::TIME, "time", 8, "D"),
    (&Type::TIMESTAMP, "timestamp", 8, "D"),
    (&Type::TIMESTAMPTZ, "timestamptz", 8, "D"),
    (&Type::OID, "oid", 4, "N"),
    (&Type::NAME, "name", 64, "S"),
    (&Type::CHAR, "char", 1, "Z"),
];

/// What `format_type(oid, typmod)` answers.
pub fn format_type(oid: u32, typmod: i32) -> Option<String> {
    let name = match Type::from_oid(oid)? {
        Type::BOOL => "boolean",
        Type::INT2 => "smallint",
        Type::INT4 => "integer",
        Type::INT8 => "bigint",
        Type::FLOAT4 => "real",
        Type::FLOAT8 => "double precision",
        Type::NUMERIC if typmod >= 4 => {
            let m = typmod - 4;
            return Some(format!("numeric({},{})", m >> 16, m & 0xffff));
        }
        Type::NUMERIC => "numeric",
        Type::VARCHAR => "character varying",
        Type::TIMESTAMP => "timestamp without time zone",
        Type::TIMESTAMPTZ => "timestamp with time zone",
        Type::TIME => "time without time zone",
        Type::CHAR => "\"char\"",
        other => return Some(other.name().to_string()),
    };
    Some(name.to_string())
}

impl Catalog {
    fn oid(&self, i: usize) -> i32 {
        FIRST_RELATION + i32::try_from(i).unwrap_or(0)
    }

    /// Every catalog table, by name.
    fn tables(&self) -> Result<Vec<(&'static str, RecordBatch)>> {
        let rels = &self.relations;
        let n = rels.len();
        let oids: Vec<i32> = (0..n).map(|i| self.oid(i)).collect();
        let int = DataType::Int32;
        let text = DataType::Utf8;
        let text_list = DataType::List(Arc::new(Field::new("item", DataType::Utf8, true)));
        let zeros = |n: usize| ints(std::iter::repeat_n(0, n));
        let falses = |n: usize| bools(std::iter::repeat_n(false, n));
        let namespace = table(vec![
            ("oid", ints([PG_CATALOG, PUBLIC, INFORMATION_SCHEMA])),
            (
                "nspname",
                texts(["pg_catalog", "public", "information_schema"]),
            ),
            ("nspowner", ints([10, 10, 10])),
            ("nspacl", nulls(&text, 3)),
        ])?;
        let class = table(vec![
            ("oid", ints(oids.iter().copied())),
            ("relname", texts(rels.iter().map(|r| r.name.as_str()))),
            ("relnamespace", ints(std::iter::repeat_n(PUBLIC, n))),
            ("reltype", zeros(n)),
            ("reloftype", zeros(n)),
            ("relowner", ints(std::iter::repeat_n(10, n))),
            (
                "relam",
                ints(rels.iter().map(|r| if r.view { 0 } else { 2 })),
            ),
            ("relfilenode", zeros(n)),
            ("reltablespace", zeros(n)),
            ("relpages", zeros(n)),
            (
                "reltuples",
                Arc::new(Float32Array::from_iter_values(std::iter::repeat_n(-1.0, n))),
            ),
            ("relallvisible", zeros(n)),
            ("reltoastrelid", zeros(n)),
            ("relhasindex", falses(n)),
            ("relisshared", falses(n)),
            ("relpersistence", texts(std::iter::repeat_n("p", n))),
            (
                "relkind",
                texts(rels.iter().map(|r| if r.view { "v" } else { "r" })),
            ),
            (
                "relnatts",
                smallints(
                    rels.iter()
                        .map(|r| i16::try_from(r.schema.fields().len()).unwrap_or(i16::MAX)),
                ),
            ),
            ("relchecks", smallints(std::iter::repeat_n(0, n))),
            ("relhasrules", falses(n)),
            ("relhastriggers", falses(n)),
            ("relhassubclass", falses(n)),
            ("relrowsecurity", falses(n)),
            ("relforcerowsecurity", falses(n)),
            ("relispopulated", bools(std::iter::repeat_n(true, n))),
            ("relreplident", texts(std::iter::repeat_n("d", n))),
            ("relispartition", falses(n)),
            ("relrewrite", zeros(n)),
            ("relfrozenxid", zeros(n)),
            ("relminmxid", zeros(n)),
            ("relacl", nulls(&text, n)),
            ("reloptions", nulls(&text_list, n)),
            ("relpartbound", nulls(&text, n)),
        ])?;
        let columns: Vec<(i32, i16, &Field)> =
            rels.iter()
                .enumerate()
                .flat_map(|(i, r)| {
                    let oid = self.oid(i);
                    r.schema.fields().iter().enumerate().map(move |(j, f)| {
                        (oid, i16::try_from(j + 1).unwrap_or(i16::MAX), f.as_ref())
                    })
                })
                .collect();
        let m = columns.len();
        let type_oid = |f: &Field| i32::try_from(pg_type(f.data_type()).oid()).unwrap_or(0);
        let attribute = table(vec![
            ("attrelid", ints(columns.iter().map(|c| c.0))),
            (
                "attname",
                texts(columns.iter().map(|c| c.2.name().as_str())),
            ),
            ("atttypid", ints(columns.iter().map(|c| type_oid(c.2)))),
            ("attstattarget", ints(std::iter::repeat_n(-1, m))),
            ("attlen", smallints(std::iter::repeat_n(-1, m))),
            ("attnum", smallints(columns.iter().map(|c| c.1))),
            ("attndims", zeros(m)),
            ("attcacheoff", ints(std::iter::repeat_n(-1, m))),
            (
                "atttypmod",
                ints(columns.iter().map(|c| type_modifier(c.2.data_type()))),
            ),
            ("attbyval", falses(m)),
            ("attalign", texts(std::iter::repeat_n("i", m))),
            ("attstorage", texts(std::iter::repeat_n("p", m))),
            ("attcompression", texts(std::iter::repeat_n("", m))),
            (
                "attnotnull",
                bools(columns.iter().map(|c| !c.2.is_nullable())),
            ),
            ("atthasdef", falses(m)),
            ("atthasmissing", falses(m)),
            ("attidentity", texts(std::iter::repeat_n("", m))),
            ("attgenerated", texts(std::iter::repeat_n("", m))),
            ("attisdropped", falses(m)),
            ("attislocal", bools(std::iter::repeat_n(true, m))),
            ("attinhcount", zeros(m)),
            (
                "attcollation",
                ints(columns.iter().map(|c| {
                    if pg_type(c.2.data_type()) == Type::VARCHAR {
                        100
                    } else {
                        0
                    }
                })),
            ),
            ("attacl", nulls(&text, m)),
            ("attoptions", nulls(&text_list, m)),
            ("attfdwoptions", nulls(&text_list, m)),
        ])?;
        let t = TYPES.len();
        let pgtype = table(vec![
            (
                "oid",
                ints(TYPES.iter().map(|t| i32::try_from(t.0.oid()).unwrap_or(0))),
            ),
            ("typname", texts(TYPES.iter().map(|t| t.1))),
            ("typnamespace", ints(std::iter::repeat_n(PG_CATALOG, t))),
            ("typowner", ints(std::iter::repeat_n(10, t))),
            ("typlen", smallints(TYPES.iter().map(|t| t.2))),
            (
                "typbyval",
                bools(TYPES.iter().map(|t| (1..=8).contains(&t.2))),
            ),
            ("typtype", texts(std::iter::repeat_n("b", t))),
            ("typcategory", texts(TYPES.iter().map(|t| t.3))),
            ("typispreferred", falses(t)),
            ("typisdefined", bools(std::iter::repeat_n(true, t))),
            ("typdelim", texts(std::iter::repeat_n(",", t))),
            ("typrelid", zeros(t)),
            ("typelem", zeros(t)),
            ("typarray", zeros(t)),
            (
                "typinput",
                texts(TYPES.iter().map(|t| format!("{}in", t.1))),
            ),
            (
                "typoutput",
                texts(TYPES.iter().map(|t| format!("{}out", t.1))),
            ),
            ("typnotnull", falses(t)),
            ("typbasetype", zeros(t)),
            ("typtypmod", ints(std::iter::repeat_n(-1, t))),
            ("typndims", zeros(t)),
            (
                "typcollation",
                ints(TYPES.iter().map(|t| if t.3 == "S" { 100 } else { 0 })),
            ),
            ("typdefault", nulls(&text, t)),
        ])?;
        let database = table(vec![
            ("oid", ints([1])),
            ("datname", texts([self.database.as_str()])),
            ("datdba", ints([10])),
            ("encoding", ints([6])),
            ("datlocprovider", texts(["c"])),
            ("datistemplate", falses(1)),
            ("datallowconn", bools([true])),
            ("datconnlimit", ints([-1])),
            ("datcollate", texts(["C.UTF-8"])),
            ("datctype", texts(["C.UTF-8"])),
            ("datacl", nulls(&text, 1)),
        ])?;
        let roles = table(vec![
            ("oid", ints([10])),
            ("rolname", texts(["eddy"])),
            ("rolsuper", bools([true])),
            ("rolinherit", bools([true])),
            ("rolcreaterole", falses(1)),
            ("rolcreatedb", falses(1)),
            ("rolcanlogin", bools([true])),
            ("rolreplication", falses(1)),
            ("rolconnlimit", ints([-1])),
            ("rolvaliduntil", nulls(&text, 1)),
            ("rolbypassrls", falses(1)),
            ("rolconfig", nulls(&text_list, 1)),
        ])?;
        let am = table(vec![
            ("oid", ints([2])),
            ("amname", texts(["heap"])),
            ("amhandler", texts(["heap_tableam_handler"])),
            ("amtype", texts(["t"])),
        ])?;
        let collation = table(vec![
            ("oid", ints([100])),
            ("collname", texts(["default"])),
            ("collnamespace", ints([PG_CATALOG])),
            ("collowner", ints([10])),
            ("collprovider", texts(["d"])),
            ("collencoding", ints([-1])),
        ])?;
        let tables_view = {
            let t: Vec<&Relation> = rels.iter().filter(|r| !r.view).collect();
            let k = t.len();
            table(vec![
                ("schemaname", texts(std::iter::repeat_n("public", k))),
                ("tablename", texts(t.iter().map(|r| r.name.as_str()))),
                ("tableowner", texts(std::iter::repeat_n("eddy", k))),
                ("tablespace", nulls(&text, k)),
                ("hasindexes", falses(k)),
                ("hasrules", falses(k)),
                ("hastriggers", falses(k)),
                ("rowsecurity", falses(k)),
            ])?
        };
        let views_view = {
            let v: Vec<&Relation> = rels.iter().filter(|r| r.view).collect();
            let k = v.len();
            table(vec![
                ("schemaname", texts(std::iter::repeat_n("public", k))),
                ("viewname", texts(v.iter().map(|r| r.name.as_str()))),
                ("viewowner", texts(std::iter::repeat_n("eddy", k))),
                ("definition", nulls(&text, k)),
            ])?
        };
        let settings = table(vec![
            ("name", texts(SETTINGS.iter().map(|s| s.0))),
            ("setting", texts(SETTINGS.iter().map(|s| s.1))),
        ])?;
        let mut all = vec![
            ("pg_namespace", namespace),
            ("pg_class", class),
            ("pg_attribute", attribute),
            ("pg_type", pgtype),
            ("pg_database", database),
            ("pg_roles", roles.clone()),
            ("pg_authid", roles),
            ("pg_am", am),
            ("pg_collation", collation),
            ("pg_tables", tables_view),
            ("pg_views", views_view),
            ("pg_settings", settings),
        ];
        // Catalogs that list what Eddy does not have (defaults, indexes,
        // constraints, inheritance, triggers, rules, policies, statistics,
        // publications, descriptions): empty, with the columns psql reads.
        let oid = || ("oid", int.clone());
        for (name, columns) in [
            (
                "pg_attrdef",
                vec![
                    oid(),
                    ("adrelid", int.clone()),
                    ("adnum", DataType::Int16),
                    ("adbin", text.clone()),
                ],
            ),
            (
                "pg_index",
                vec![
                    ("indexrelid", int.clone()),
                    ("indrelid", int.clone()),
                    ("indnatts", DataType::Int16),
                    ("indisunique", DataType::Boolean),
                    ("indisprimary", DataType::Boolean),
                    ("indisclustered", DataType::Boolean),
                    ("indisvalid", DataType::Boolean),
                    ("indisreplident", DataType::Boolean),
                    ("indkey", text.clone()),
                    ("indexprs", text.clone()),
                    ("indpred", text.clone()),
                ],
            ),
            (
                "pg_constraint",
                vec![
                    oid(),
                    ("conname", text.clone()),
                    ("connamespace", int.clone()),
                    ("contype", text.clone()),
                    ("condeferrable", DataType::Boolean),
                    ("condeferred", DataType::Boolean),
                    ("convalidated", DataType::Boolean),
                    ("conrelid", int.clone()),
                    ("conindid", int.clone()),
                    ("conparentid", int.clone()),
                    ("confrelid", int.clone()),
                    ("conislocal", DataType::Boolean),
                    ("coninhcount", int.clone()),
                    ("connoinherit", DataType::Boolean),
                    ("conkey", text_list.clone()),
                    ("confkey", text_list.clone()),
                ],
            ),
            (
                "pg_inherits",
                vec![
                    ("inhrelid", int.clone()),
                    ("inhparent", int.clone()),
                    ("inhseqno", int.clone()),
                    ("inhdetachpending", DataType::Boolean),
                ],
            ),
            (
                "pg_trigger",
                vec![
                    oid(),
                    ("tgrelid", int.clone()),
                    ("tgparentid", int.clone()),
                    ("tgname", text.clone()),
                    ("tgenabled", text.clone()),
                    ("tgisinternal", DataType::Boolean),
                ],
            ),
            (
                "pg_rewrite",
                vec![
                    oid(),
                    ("rulename", text.clone()),
                    ("ev_class", int.clone()),
                    ("ev_type", text.clone()),
                    ("is_instead", DataType::Boolean),
                ],
            ),
            (
                "pg_policy",
                vec![
                    oid(),
                    ("polname", text.clone()),
                    ("polrelid", int.clone()),
                    ("polcmd", text.clone()),
                    ("polpermissive", DataType::Boolean),
                    ("polroles", text_list.clone()),
                    ("polqual", text.clone()),
                    ("polwithcheck", text.clone()),
                ],
            ),
            (
                "pg_statistic_ext",
                vec![
                    oid(),
                    ("stxrelid", int.clone()),
                    ("stxname", text.clone()),
                    ("stxnamespace", int.clone()),
                    ("stxowner", int.clone()),
                    ("stxstattarget", int.clone()),
                    ("stxkeys", text.clone()),
                    ("stxkind", text_list.clone()),
                ],
            ),
            (
                "pg_publication",
                vec![
                    oid(),
                    ("pubname", text.clone()),
                    ("puballtables", DataType::Boolean),
                    ("pubinsert", DataType::Boolean),
                    ("pubupdate", DataType::Boolean),
                    ("pubdelete", DataType::Boolean),
                    ("pubtruncate", DataType::Boolean),
                    ("pubviaroot", DataType::Boolean),
                ],
            ),
            (
                "pg_publication_rel",
                vec![
                    oid(),
                    ("prpubid", int.clone()),
                    ("prrelid", int.clone()),
                    ("prqual", text.clone()),
                    ("prattrs", text.clone()),
                ],
            ),
            (
                "pg_publication_namespace",
                vec![oid(), ("pnpubid", int.clone()), ("pnnspid", int.clone())],
            ),
            (
                "pg_description",
                vec![
                    ("objoid", int.clone()),
                    ("classoid", int.clone()),
                    ("objsubid", int.clone()),
                    ("description", text.clone()),
                ],
            ),
            (
                "pg_foreign_table",
                vec![
                    ("ftrelid", int.clone()),
                    ("ftserver", int.clone()),
                    ("ftoptions", text_list.clone()),
                ],
            ),
            (
                "pg_partitioned_table",
                vec![
                    ("partrelid", int.clone()),
                    ("partstrat", text.clone()),
                    ("partnatts", DataType::Int16),
                ],
            ),
            (
                "pg_tablespace",
                vec![oid(), ("spcname", text.clone()), ("spcowner", int.clone())],
            ),
            (
                "pg_proc",
                vec![
                    oid(),
                    ("proname", text.clone()),
                    ("pronamespace", int.clone()),
                    ("prorettype", int.clone()),
                    ("prokind", text.clone()),
                ],
            ),
            (
                "pg_sequence",
                vec![("seqrelid", int.clone()), ("seqtypid", int.clone())],
            ),
            (
                "pg_enum",
                vec![
                    oid(),
                    ("enumtypid", int.clone()),
                    ("enumsortorder", DataType::Float32),
                    ("enumlabel", text.clone()),
                ],
            ),
            (
                "pg_matviews",
                vec![
                    ("schemaname", text.clone()),
                    ("matviewname", text.clone()),
                    ("definition", text.clone()),
                ],
            ),
            (
                "pg_extension",
                vec![
                    oid(),
                    ("extname", text.clone()),
                    ("extversion", text.clone()),
                ],
            ),
        ] {
            all.push((name, empty(&columns)?));
        }
        Ok(all)
    }
}

/// The settings `SHOW` and `pg_settings` answer.
pub const SETTINGS: &[(&str, &str)] = &[
    ("server_version", "16.6"),
    ("server_version_num", "160006"),
    ("server_encoding", "UTF8"),
    ("client_encoding", "UTF8"),
    ("datestyle", "ISO, MDY"),
    ("timezone", "UTC"),
    ("intervalstyle", "postgres"),
    ("integer_datetimes", "on"),
    ("standard_conforming_strings", "on"),
    ("search_path", "public"),
    ("transaction_isolation", "serializable"),
    ("default_transaction_isolation", "serializable"),
    ("transaction_read_only", "off"),
    ("max_identifier_length", "63"),
    ("lc_collate", "C.UTF-8"),
    ("lc_ctype", "C.UTF-8"),
    ("application_name", ""),
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn types_are_named_as_postgresql_names_them() {
        assert_eq!(format_type(23, -1).as_deref(), Some("integer"));
        assert_eq!(format_type(1043, -1).as_deref(), Some("character varying"));
        assert_eq!(
            format_type(1700, type_modifier(&DataType::Decimal128(10, 2))).as_deref(),
            Some("numeric(10,2)")
        );
        assert_eq!(
            format_type(1114, -1).as_deref(),
            Some("timestamp without time zone")
        );
        assert_eq!(format_type(999_999, -1), None);
    }
}
