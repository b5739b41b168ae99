//! Statements of a logged-in connection, in the simple and the extended
//! query protocol: queries answered from the pipeline's snapshot with its
//! catalog, changes fed into it (at once, or at `COMMIT` inside a
//! transaction), and the session's own statements.

use std::fmt::Debug;
use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::datatypes::{DataType, TimeUnit};
use datafusion::common::ScalarValue;
use eddy_dbsp::ZSet;
use futures::{stream, Sink};
use pgwire::api::portal::{Format, Portal};
use pgwire::api::query::{ExtendedQueryHandler, SimpleQueryHandler};
use pgwire::api::results::{
    DescribePortalResponse, DescribeResponse, DescribeStatementResponse, FieldFormat, FieldInfo,
    QueryResponse, Response, Tag,
};
use pgwire::api::stmt::{QueryParser, StoredStatement};
use pgwire::api::store::PortalStore;
use pgwire::api::{ClientInfo, ClientPortalStore, Type, METADATA_DATABASE};
use pgwire::error::{PgWireError, PgWireResult};
use pgwire::messages::response::TransactionStatus;
use pgwire::messages::PgWireBackendMessage;
use tokio::sync::Mutex;

use super::catalog::{Catalog, Relation, SETTINGS};
use super::dml;
use super::encode;
use super::error::{code, query_error_in, user_error};
use super::statement::{self, Statement};
use crate::manager::Manager;
use crate::query::{self, Param, Request};
use crate::runner::Runner;

/// Changes of the open transaction, fed at `COMMIT`.
#[derive(Default)]
struct Pending {
    changes: Vec<(String, ZSet)>,
}

/// Serves statements for every connection.
pub struct Handler {
    manager: Arc<Manager>,
    parser: Arc<Parser>,
}

impl Handler {
    /// Statements over the pipelines of `manager`.
    pub fn new(manager: Arc<Manager>) -> Self {
        Self {
            manager,
            parser: Arc::new(Parser),
        }
    }

    fn running(&self, database: &str) -> PgWireResult<Arc<Runner>> {
        self.manager
            .runner(database)
            .map_err(|e| user_error(code::NOT_RUNNING, e.message))
    }

    /// The catalog of `database` as its snapshot shows it.
    fn catalog(
        &self,
        database: &str,
        runner: &Runner,
        snapshot: &crate::runner::Snapshot,
    ) -> PgWireResult<Catalog> {
        let (tables, views) = self
            .manager
            .relations(database)
            .map_err(|e| user_error(code::UNKNOWN_DATABASE, e.message))?;
        let mut relations = Vec::new();
        for t in tables {
            if let Ok(schema) = runner.feeder.schema(&t) {
                relations.push(Relation {
                    schema: Arc::clone(schema),
                    name: t,
                    view: false,
                });
            }
        }
        for v in views {
            if let Some((_, schema, _)) = snapshot.iter().find(|(n, _, _)| *n == v) {
                relations.push(Relation {
                    schema: Arc::clone(schema),
                    name: v,
                    view: true,
                });
            }
        }
        Ok(Catalog {
            database: database.to_string(),
            relations,
        })
    }

    /// Runs (or only plans, with `describe`) a query.
    async fn query(
        &self,
        database: &str,
        sql: &str,
        params: Vec<Param>,
        describe: bool,
    ) -> PgWireResult<query::Answer> {
        let runner = self.running(database)?;
        let limits = self
            .manager
            .query_limits(database)
            .map_err(|e| user_error(code::UNKNOWN_DATABASE, e.message))?;
        let snapshot = runner
            .snapshot()
            .await
            .map_err(|e| user_error(code::NOT_RUNNING, e))?;
        let catalog = self.catalog(database, &runner, &snapshot)?;
        let request = Request {
            snapshot,
            sql: sql.to_string(),
            params,
            extras: Some(Arc::new(catalog)),
            describe,
        };
        query::run_request(request, limits)
            .await
            .map_err(|e| match e {
                query::QueryError::Invalid(m) => {
                    query::QueryError::Invalid(self.manager.explain_query_error(database, m))
                }
                other => other,
            })
            .map_err(|e| query_error_in(e, sql))
    }

    /// Runs one statement.
    async fn execute<C>(
        &self,
        client: &mut C,
        statement: &Statement,
        params: Vec<Param>,
        format: &Format,
    ) -> PgWireResult<Response>
    where
        C: ClientInfo + Unpin + Send + Sync,
    {
        let database = database(client);
        let pending = client
            .session_extensions()
            .get_or_insert_with(|| Mutex::new(Pending::default()));
        let status = client.transaction_status();
        if status == TransactionStatus::Error
            && !matches!(statement, Statement::Commit | Statement::Rollback)
        {
            return Err(user_error(
                "25P02",
                "current transaction is aborted, commands ignored until end of transaction block",
            ));
        }
        match statement {
            Statement::Query(sql) => {
                let answer = self.query(&database, sql, params, false).await?;
                let fields = Arc::new(encode::fields(&answer.schema, format));
                let rows = encode::rows(&answer.batches, &fields)?;
                Ok(Response::Query(QueryResponse::new(
                    fields,
                    stream::iter(rows.into_iter().map(Ok)),
                )))
            }
            Statement::Change(change) => {
                let runner = self.running(&database)?;
                let limits = self
                    .manager
                    .query_limits(&database)
                    .map_err(|e| user_error(code::UNKNOWN_DATABASE, e.message))?;
                let (table, rows) = dml::changes(change, &runner, limits, params).await?;
                let n = rows.len();
                if status == TransactionStatus::Transaction {
                    pending.lock().await.changes.push((table, rows));
                } else {
                    dml::apply(&runner, vec![(table, rows)]).await?;
                }
                let tag = Tag::new(change.command());
                Ok(Response::Execution(match change.kind {
                    dml::ChangeKind::Insert { .. } => tag.with_oid(0).with_rows(n),
                    dml::ChangeKind::Delete { .. } => tag.with_rows(n),
                }))
            }
            Statement::Begin => {
                pending.lock().await.changes.clear();
                Ok(Response::TransactionStart(Tag::new("BEGIN")))
            }
            Statement::Commit => {
                let changes = std::mem::take(&mut pending.lock().await.changes);
                if status == TransactionStatus::Error {
                    return Ok(Response::TransactionEnd(Tag::new("ROLLBACK")));
                }
                if !changes.is_empty() {
                    let runner = self.running(&database)?;
                    dml::apply(&runner, merge(changes)?).await?;
                }
                Ok(Response::TransactionEnd(Tag::new("COMMIT")))
            }
            Statement::Rollback => {
                pending.lock().await.changes.clear();
                Ok(Response::TransactionEnd(Tag::new("ROLLBACK")))
            }
            Statement::Ignored(tag) => Ok(Response::Execution(Tag::new(tag))),
            Statement::Show(name) => {
                let value = show(name, client)?;
                let fields = Arc::new(vec![FieldInfo::new(
                    name.clone(),
                    None,
                    None,
                    Type::TEXT,
                    format.format_for(0),
                )]);
                let mut encoder = pgwire::api::results::DataRowEncoder::new(Arc::clone(&fields));
                encoder.encode_field(&Some(value))?;
                let row = encoder.take_row();
                Ok(Response::Query(QueryResponse::new(
                    fields,
                    stream::iter(vec![Ok(row)]),
                )))
            }
        }
    }

    /// The row description and parameter types of a statement, planned
    /// with `params` when they are bound.
    async fn describe<C>(
        &self,
        client: &C,
        statement: &Statement,
        params: Option<Vec<Param>>,
        format: &Format,
    ) -> PgWireResult<(Vec<Option<DataType>>, Option<Vec<FieldInfo>>)>
    where
        C: ClientInfo + Unpin + Send + Sync,
    {
        match statement {
            Statement::Query(sql) => {
                let answer = self
                    .query(&database(client), sql, params.unwrap_or_default(), true)
                    .await?;
                Ok((
                    answer.param_types,
                    Some(encode::fields(&answer.schema, format)),
                ))
            }
            Statement::Show(name) => Ok((
                Vec::new(),
                Some(vec![FieldInfo::new(
                    name.clone(),
                    None,
                    None,
                    Type::TEXT,
                    format.format_for(0),
                )]),
            )),
            Statement::Change(change) => Ok((vec![None; change.params], None)),
            _ => Ok((Vec::new(), None)),
        }
    }
}

/// The pipeline a connection reads: its database.
fn database<C: ClientInfo>(client: &C) -> String {
    client
        .metadata()
        .get(METADATA_DATABASE)
        .cloned()
        .unwrap_or_default()
}

/// A transaction's changes, one chunk per table in the order tables were
/// first changed (each chunk keeps its statements' order).
fn merge(changes: Vec<(String, ZSet)>) -> PgWireResult<Vec<(String, ZSet)>> {
    let mut tables: Vec<(String, Vec<ZSet>)> = Vec::new();
    for (table, rows) in changes {
        match tables.iter_mut().find(|(t, _)| *t == table) {
            Some((_, parts)) => parts.push(rows),
            None => tables.push((table, vec![rows])),
        }
    }
    tables
        .into_iter()
        .map(|(table, parts)| {
            let schema = parts[0].schema();
            ZSet::concat(&schema, &parts)
                .map(|z| (table, z))
                .map_err(|e| user_error(code::INTERNAL, e.to_string()))
        })
        .collect()
}

/// `SHOW name`.
fn show<C: ClientInfo>(name: &str, client: &C) -> PgWireResult<String> {
    let key = name.replace(' ', "");
    if key == "application_name" {
        return Ok(client
            .metadata()
            .get("application_name")
            .cloned()
            .unwrap_or_default());
    }
    SETTINGS
        .iter()
        .find(|(n, _)| *n == key)
        .map(|(_, v)| v.to_string())
        .ok_or_else(|| {
            user_error(
                code::UNDEFINED_OBJECT,
                format!("unrecognized configuration parameter \"{name}\""),
            )
        })
}

/// The Arrow type a client's parameter type stands for, when it has one.
fn arrow_type(t: &Type) -> Option<DataType> {
    Some(match *t {
        Type::BOOL => DataType::Boolean,
        Type::INT2 => DataType::Int16,
        Type::INT4 => DataType::Int32,
        Type::INT8 => DataType::Int64,
        Type::FLOAT4 => DataType::Float32,
        Type::FLOAT8 => DataType::Float64,
        Type::TEXT | Type::VARCHAR | Type::BPCHAR | Type::NAME => DataType::Utf8,
        Type::DATE => DataType::Date32,
        Type::TIMESTAMP => DataType::Timestamp(TimeUnit::Microsecond, None),
        Type::TIMESTAMPTZ => DataType::Timestamp(TimeUnit::Microsecond, Some("+00:00".into())),
        _ => return None,
    })
}

/// The bound parameters of a portal as query parameters.
fn params(portal: &Portal<Statement>) -> PgWireResult<Vec<Param>> {
    let bad = |i: usize, e: &dyn std::fmt::Display| {
        user_error(code::INVALID_TEXT, format!("parameter ${}: {e}", i + 1))
    };
    (0..portal.parameter_len())
        .map(|i| {
            let Some(Some(raw)) = portal.parameters.get(i) else {
                return Ok(Param::Value(ScalarValue::Null));
            };
            let declared = portal
                .statement
                .parameter_types
                .get(i)
                .cloned()
                .flatten()
                .filter(|t| *t != Type::UNKNOWN);
            if portal.parameter_format.is_binary(i) {
                match declared {
                    Some(t) => binary_param(portal, i, &t),
                    // An untyped binary value is text's bytes.
                    None => String::from_utf8(raw.to_vec())
                        .map(Param::Text)
                        .map_err(|e| bad(i, &e)),
                }
            } else {
                let text = String::from_utf8(raw.to_vec()).map_err(|e| bad(i, &e))?;
                match declared.as_ref().and_then(arrow_type) {
                    Some(t) => ScalarValue::try_from_string(text, &t)
                        .map(Param::Value)
                        .map_err(|e| bad(i, &e.strip_backtrace())),
                    None => Ok(Param::Text(text)),
                }
            }
        })
        .collect()
}

fn binary_param(portal: &Portal<Statement>, i: usize, t: &Type) -> PgWireResult<Param> {
    let v = match *t {
        Type::BOOL => ScalarValue::Boolean(portal.parameter::<bool>(i, t)?),
        Type::INT2 => ScalarValue::Int16(portal.parameter::<i16>(i, t)?),
        Type::INT4 => ScalarValue::Int32(portal.parameter::<i32>(i, t)?),
        Type::INT8 => ScalarValue::Int64(portal.parameter::<i64>(i, t)?),
        Type::FLOAT4 => ScalarValue::Float32(portal.parameter::<f32>(i, t)?),
        Type::FLOAT8 => ScalarValue::Float64(portal.parameter::<f64>(i, t)?),
        Type::TEXT | Type::VARCHAR | Type::BPCHAR | Type::NAME => {
            ScalarValue::Utf8(portal.parameter::<String>(i, t)?)
        }
        Type::BYTEA => ScalarValue::Binary(portal.parameter::<Vec<u8>>(i, t)?),
        Type::NUMERIC => {
            let d = portal.parameter::<rust_decimal::Decimal>(i, t)?;
            return Ok(d.map_or(Param::Value(ScalarValue::Null), |d| {
                Param::Text(d.to_string())
            }));
        }
        Type::DATE => {
            let d = portal.parameter::<chrono::NaiveDate>(i, t)?;
            return Ok(d.map_or(Param::Value(ScalarValue::Null), |d| {
                Param::Text(d.to_string())
            }));
        }
        Type::TIMESTAMP => {
            let d = portal.parameter::<chrono::NaiveDateTime>(i, t)?;
            return Ok(d.map_or(Param::Value(ScalarValue::Null), |d| {
                Param::Text(d.to_string())
            }));
        }
        _ => {
            return Err(user_error(
                code::NOT_SUPPORTED,
                format!(
                    "parameter ${} has type {}, which Eddy does not read in binary",
                    i + 1,
                    t.name()
                ),
            ))
        }
    };
    Ok(Param::Value(v))
}

fn pg_types(types: &[Option<DataType>], declared: &[Option<Type>]) -> Vec<Type> {
    types
        .iter()
        .enumerate()
        .map(|(i, t)| match declared.get(i).cloned().flatten() {
            Some(d) if d != Type::UNKNOWN => d,
            _ => t.as_ref().map_or(Type::TEXT, encode::pg_type),
        })
        .collect()
}

#[async_trait]
impl SimpleQueryHandler for Handler {
    async fn do_query<C>(&self, client: &mut C, text: &str) -> PgWireResult<Vec<Response>>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let statements = statement::parse(text.to_string()).await?;
        let mut responses = Vec::with_capacity(statements.len());
        for s in &statements {
            match self
                .execute(client, s, Vec::new(), &Format::UnifiedText)
                .await
            {
                Ok(r) => {
                    // A statement of a simple query sees the transaction
                    // state the one before it left.
                    match &r {
                        Response::TransactionStart(_) => {
                            client.set_transaction_status(TransactionStatus::Transaction)
                        }
                        Response::TransactionEnd(_) => {
                            client.set_transaction_status(TransactionStatus::Idle)
                        }
                        _ => {}
                    }
                    responses.push(r);
                }
                Err(e) => {
                    if statements.len() == 1 {
                        return Err(e);
                    }
                    responses.push(Response::Error(Box::new(e.into())));
                    break;
                }
            }
        }
        Ok(responses)
    }
}

/// Parses the statements of the extended protocol (one per `Parse`).
#[derive(Debug)]
pub struct Parser;

#[async_trait]
impl QueryParser for Parser {
    type Statement = Statement;

    async fn parse_sql<C>(
        &self,
        _client: &C,
        sql: &str,
        _types: &[Option<Type>],
    ) -> PgWireResult<Option<Statement>>
    where
        C: ClientInfo + Unpin + Send + Sync,
    {
        let mut statements = statement::parse(sql.to_string()).await?;
        match statements.len() {
            0 => Ok(None),
            1 => Ok(statements.pop()),
            _ => Err(user_error(
                code::SYNTAX,
                "cannot insert multiple commands into a prepared statement",
            )),
        }
    }

    fn get_parameter_types(&self, _stmt: &Statement) -> PgWireResult<Vec<Type>> {
        Ok(Vec::new())
    }

    fn get_result_schema(
        &self,
        _stmt: &Statement,
        _column_format: Option<&Format>,
    ) -> PgWireResult<Vec<FieldInfo>> {
        Ok(Vec::new())
    }
}

#[async_trait]
impl ExtendedQueryHandler for Handler {
    type Statement = Statement;
    type QueryParser = Parser;

    fn query_parser(&self) -> Arc<Parser> {
        Arc::clone(&self.parser)
    }

    async fn do_query<C>(
        &self,
        client: &mut C,
        portal: &Portal<Statement>,
        _max_rows: usize,
    ) -> PgWireResult<Response>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = Statement>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let params = params(portal)?;
        self.execute(
            client,
            &portal.statement.statement,
            params,
            &portal.result_column_format,
        )
        .await
    }

    async fn do_describe_statement<C>(
        &self,
        client: &mut C,
        stmt: &StoredStatement<Statement>,
    ) -> PgWireResult<DescribeStatementResponse>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = Statement>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let (types, fields) = self
            .describe(client, &stmt.statement, None, &Format::UnifiedText)
            .await?;
        let fields = fields
            .unwrap_or_default()
            .into_iter()
            .map(|f| {
                FieldInfo::new(
                    f.name().to_string(),
                    None,
                    None,
                    f.datatype().clone(),
                    FieldFormat::Text,
                )
                .with_type_modifier(f.type_modifier())
            })
            .collect();
        Ok(DescribeStatementResponse::new(
            pg_types(&types, &stmt.parameter_types),
            fields,
        ))
    }

    async fn do_describe_portal<C>(
        &self,
        client: &mut C,
        portal: &Portal<Statement>,
    ) -> PgWireResult<DescribePortalResponse>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = Statement>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let params = params(portal)?;
        let (_, fields) = self
            .describe(
                client,
                &portal.statement.statement,
                Some(params),
                &portal.result_column_format,
            )
            .await?;
        Ok(match fields {
            Some(fields) => DescribePortalResponse::new(fields),
            None => DescribePortalResponse::no_data(),
        })
    }
}
