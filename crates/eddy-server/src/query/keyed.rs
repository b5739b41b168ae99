//! A keyed table's rows as an ad-hoc query reads them: scanned only when
//! the query executes (planning and `EXPLAIN` read nothing), in batches
//! that count against the query's memory pool while they are read ahead
//! of it (the operators that keep rows count them themselves), and read
//! no further once the query is cancelled (its time limit) or out of
//! memory.

use std::sync::Arc;

use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::catalog::streaming::StreamingTable;
use datafusion::catalog::Session;
use datafusion::datasource::{TableProvider, TableType};
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::memory_pool::MemoryConsumer;
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::logical_expr::Expr;
use datafusion::physical_plan::stream::{RecordBatchReceiverStream, RecordBatchStreamAdapter};
use datafusion::physical_plan::streaming::PartitionStream;
use datafusion::physical_plan::ExecutionPlan;
use eddy_sql::pipeline::KeyedRows;
use futures::StreamExt;

/// Batches read ahead of the query, at most.
const READ_AHEAD: usize = 2;

/// The table provider of a keyed table's rows, read by `read`.
pub(super) fn table(name: &str, schema: SchemaRef, read: KeyedRows) -> Result<KeyedTable> {
    let rows = KeyedScan {
        name: name.to_string(),
        schema: Arc::clone(&schema),
        read,
    };
    Ok(KeyedTable(StreamingTable::try_new(
        schema,
        vec![Arc::new(rows)],
    )?))
}

/// A streaming table that is a base table (`information_schema` lists it
/// as the table it is).
#[derive(Debug)]
pub(super) struct KeyedTable(StreamingTable);

#[async_trait::async_trait]
impl TableProvider for KeyedTable {
    fn schema(&self) -> SchemaRef {
        self.0.schema()
    }

    fn table_type(&self) -> TableType {
        TableType::Base
    }

    async fn scan(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
        limit: Option<usize>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        self.0.scan(state, projection, filters, limit).await
    }
}

/// One scan of a keyed table (a query may scan it more than once).
struct KeyedScan {
    name: String,
    schema: SchemaRef,
    read: KeyedRows,
}

impl std::fmt::Debug for KeyedScan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyedScan")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl PartitionStream for KeyedScan {
    fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    fn execute(&self, ctx: Arc<TaskContext>) -> SendableRecordBatchStream {
        let mut builder = RecordBatchReceiverStream::builder(Arc::clone(&self.schema), READ_AHEAD);
        let tx = builder.tx();
        // A batch counts from its decoding until the query takes it.
        let reservation = Arc::new(
            MemoryConsumer::new(format!("scan of table {}", self.name)).register(ctx.memory_pool()),
        );
        let (grow, read) = (Arc::clone(&reservation), Arc::clone(&self.read));
        builder.spawn_blocking(move || {
            let mut refused: Option<DataFusionError> = None;
            let read = read(&mut |batch: RecordBatch| {
                if let Err(e) = grow.try_grow(batch.get_array_memory_size()) {
                    refused = Some(e);
                    return false;
                }
                // Fails once the query has gone: the read stops.
                tx.blocking_send(Ok(batch)).is_ok()
            });
            match refused {
                Some(e) => Err(e),
                None => read.map_err(|e| DataFusionError::Execution(e.to_string())),
            }
        });
        let stream = builder.build().map(move |batch| {
            if let Ok(b) = &batch {
                reservation.shrink(b.get_array_memory_size());
            }
            batch
        });
        Box::pin(RecordBatchStreamAdapter::new(
            Arc::clone(&self.schema),
            stream,
        ))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::time::{Duration, Instant};

    use datafusion::arrow::array::Int64Array;
    use datafusion::arrow::datatypes::{DataType, Field, Schema};

    use super::*;
    use crate::query::{run, QueryError, QueryLimits};
    use crate::runner::Rows;

    fn schema() -> SchemaRef {
        Arc::new(Schema::new(vec![Field::new("x", DataType::Int64, false)]))
    }

    /// A table read in `chunks` batches of `rows` rows (forever when
    /// `None`), counting the batches it gave and setting `done` when the
    /// read returns.
    fn table(
        chunks: Option<usize>,
        rows: i64,
        given: Arc<AtomicUsize>,
        done: Arc<AtomicBool>,
    ) -> Vec<(String, SchemaRef, Rows)> {
        let read: KeyedRows = Arc::new(move |sink| {
            let mut i = 0;
            while chunks.is_none_or(|n| i < n) {
                let batch = RecordBatch::try_new(
                    schema(),
                    vec![Arc::new(Int64Array::from_iter_values(0..rows))],
                )
                .unwrap();
                given.fetch_add(1, Ordering::SeqCst);
                if !sink(batch) {
                    break;
                }
                i += 1;
            }
            done.store(true, Ordering::SeqCst);
            Ok(())
        });
        vec![("t".to_string(), schema(), Rows::Later(read))]
    }

    /// The answer of a `SELECT COUNT(*)`.
    fn count(batches: &[RecordBatch]) -> i64 {
        let column = batches[0].column(0);
        column
            .as_any()
            .downcast_ref::<Int64Array>()
            .unwrap()
            .value(0)
    }

    fn limits(memory_bytes: usize, timeout: Duration) -> QueryLimits {
        QueryLimits {
            memory_bytes,
            timeout,
            max_text_bytes: 10_000,
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_scan_reads_when_it_executes_and_as_often_as_the_query_scans() {
        let (given, done) = (
            Arc::new(AtomicUsize::new(0)),
            Arc::new(AtomicBool::new(false)),
        );
        let snapshot = table(Some(3), 10, Arc::clone(&given), Arc::clone(&done));
        let long = Duration::from_secs(60);
        let (batches, _) = run(
            snapshot,
            "EXPLAIN SELECT * FROM t".into(),
            limits(1 << 30, long),
        )
        .await
        .unwrap();
        assert!(!batches.is_empty());
        assert_eq!(given.load(Ordering::SeqCst), 0, "EXPLAIN read the table");
        let snapshot = table(Some(3), 10, Arc::clone(&given), Arc::clone(&done));
        let sql = "SELECT COUNT(*) FROM t AS a JOIN t AS b ON a.x = b.x";
        let (batches, _) = run(snapshot, sql.into(), limits(1 << 30, long))
            .await
            .unwrap();
        assert_eq!(count(&batches), 30 * 3);
        assert_eq!(given.load(Ordering::SeqCst), 6);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_scan_counts_the_batches_it_reads_ahead_against_the_memory_limit() {
        let (given, done) = (
            Arc::new(AtomicUsize::new(0)),
            Arc::new(AtomicBool::new(false)),
        );
        let one_mib = limits(1 << 20, Duration::from_secs(60));
        // 100 batches of 80 KB, counted while they wait: 8 MB pass a
        // limit of 1 MiB, a few at a time.
        let snapshot = table(Some(100), 10_000, Arc::clone(&given), Arc::clone(&done));
        let (batches, _) = run(snapshot, "SELECT COUNT(*) FROM t".into(), one_mib)
            .await
            .unwrap();
        assert_eq!(count(&batches), 1_000_000);
        // One batch of 1.6 MB does not fit: the read stops there.
        given.store(0, Ordering::SeqCst);
        done.store(false, Ordering::SeqCst);
        let snapshot = table(Some(3), 200_000, Arc::clone(&given), Arc::clone(&done));
        let answer = run(snapshot, "SELECT COUNT(*) FROM t".into(), one_mib).await;
        assert!(matches!(answer, Err(QueryError::Memory(_))), "{answer:?}");
        assert!(done.load(Ordering::SeqCst));
        assert_eq!(given.load(Ordering::SeqCst), 1);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_scan_stops_reading_when_its_query_times_out() {
        let (given, done) = (
            Arc::new(AtomicUsize::new(0)),
            Arc::new(AtomicBool::new(false)),
        );
        // Endless one-row batches: the time limit comes first.
        let snapshot = table(None, 1, Arc::clone(&given), Arc::clone(&done));
        let answer = run(
            snapshot,
            "SELECT COUNT(*) FROM t".into(),
            limits(1 << 30, Duration::from_millis(500)),
        )
        .await;
        assert!(matches!(answer, Err(QueryError::Timeout(_))), "{answer:?}");
        let waited = Instant::now();
        while !done.load(Ordering::SeqCst) && waited.elapsed() < Duration::from_secs(30) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(
            done.load(Ordering::SeqCst),
            "the read went on after the query stopped"
        );
        assert!(given.load(Ordering::SeqCst) > 0);
    }
}
