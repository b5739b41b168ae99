//! Connectors declared in SQL: `WITH ('connectors' = '[…]')` on a table
//! (inputs) or a view (outputs), each `{"name"?, "transport": {"name",
//! "config"}, "format"?: {"name", "config"}, …}` as Feldera writes them.
//!
//! A connector is read once into a [`ConnectorSpec`]: its generic
//! attributes, its format ([`FormatConfig`]) and its transport, whose
//! configuration is a typed struct of the transport's own module that
//! implements [`Transport`]. [`TRANSPORTS`] is the one registry of
//! transports: its entry says which way a transport goes, which formats it
//! carries and how its configuration is read. Configurations refuse fields
//! they do not know, by name.
//!
//! Inputs run on their own threads and hand parsed changes to the
//! pipeline's [`Feeder`], which slows them down when its buffer is full and
//! stops them when the pipeline stops; each piece fed carries the input's
//! position after it, which checkpoints record. Outputs are [`Sink`]s the
//! worker writes each step's change to, and report their own positions at
//! checkpoints.

pub mod access;
pub mod blocking;
pub mod changelog;
pub mod datagen;
pub mod delta;
pub mod file;
pub mod filter;
pub mod iceberg;
pub mod kafka;
pub mod nexmark;
pub mod outbox;
pub mod parquet;
pub mod parquet_sink;
pub mod postgres;
pub mod redis_output;
pub mod rounds;
pub mod s3;
pub mod spec;
pub mod stream;
pub mod url;

use std::any::Any;
use std::path::Path;
use std::sync::Arc;
use std::thread::JoinHandle;

use datafusion::arrow::datatypes::Fields;
use eddy_io::format::FormatKind;
use serde::de::DeserializeOwned;
use serde_json::{json, Value};

use eddy_dbsp::ZSet;

use crate::runner::{Feeder, Origin, Sink};
use crate::stats::EndpointStats;
pub use access::FileAccess;
pub use spec::{specs, specs_placed, ConnectorSpec};
pub use stream::{
    feed_piece, feed_stream, sleep_unless_stopping, wait_while_paused, Stream, StreamEnd,
    StreamPosition,
};

/// Which way a transport moves rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// Into a table.
    Input,
    /// Out of a view.
    Output,
}

/// What checking a connector may look at: the folders file connectors may
/// use, and the columns of its table or view.
pub struct CheckContext<'a> {
    /// File access rules.
    pub files: &'a FileAccess,
    /// The columns of the table it feeds or the view it drains.
    pub columns: &'a Fields,
}

/// What starting an input needs.
pub struct InputContext<'a> {
    /// Every connector of the program (a generator may feed several tables).
    pub connectors: &'a [ConnectorSpec],
    /// The pipeline's input.
    pub feeder: &'a Arc<Feeder>,
    /// The input's counters and errors.
    pub stats: Arc<EndpointStats>,
    /// The pipeline's name.
    pub pipeline: &'a str,
    /// The pipeline's id (a UUID, unique across servers: what names
    /// things the input keeps in another system, as a replication slot).
    pub pipeline_id: &'a str,
    /// File access rules.
    pub files: &'a FileAccess,
    /// Where the state the pipeline resumes holds this input up to (`{}`:
    /// nothing yet, start where the configuration says, ignoring whatever
    /// a Kafka group committed); `None` starts it as configured.
    pub position: Option<&'a Value>,
}

/// What opening an output needs.
pub struct OutputContext<'a> {
    /// The pipeline's name.
    pub pipeline: &'a str,
    /// File access rules.
    pub files: &'a FileAccess,
    /// The checkpoint folder the pipeline resumes from and the output's
    /// position there (a file is cut back to it; held-back Kafka output is
    /// sent).
    pub resume: Option<(&'a Path, &'a Value)>,
    /// Whether the pipeline's fault tolerance is exactly once.
    pub exactly_once: bool,
    /// The view's columns.
    pub columns: &'a Fields,
}

/// An input's work, run on its own thread.
pub type InputRun = Box<dyn FnOnce() + Send>;

impl InputContext<'_> {
    /// The input's thread: `run` with the connector, the pipeline's
    /// feeder and the input's counters.
    pub fn run<F>(self, spec: &ConnectorSpec, run: F) -> Result<Option<InputRun>, String>
    where
        F: FnOnce(&ConnectorSpec, &Feeder, &EndpointStats) + Send + 'static,
    {
        let (spec, feeder, stats) = (spec.clone(), self.feeder.clone(), self.stats);
        Ok(Some(Box::new(move || run(&spec, &feeder, &stats))))
    }
}

/// A transport, implemented by its typed configuration.
pub trait Transport: AsAny + Send + Sync + std::fmt::Debug {
    /// Checks the configuration with the connector's format and the
    /// columns it moves; opens nothing and connects to nothing.
    fn check(&self, spec: &ConnectorSpec, cx: &CheckContext<'_>) -> Result<(), String>;

    /// Opens an input: what its thread runs, or `None` when another
    /// connector's thread feeds its table.
    fn start_input(
        &self,
        spec: &ConnectorSpec,
        _cx: InputContext<'_>,
    ) -> Result<Option<InputRun>, String> {
        Err(format!("'{}' is not an input transport", spec.transport))
    }

    /// Opens an output.
    fn open_output(
        &self,
        spec: &ConnectorSpec,
        _cx: OutputContext<'_>,
    ) -> Result<Box<dyn Sink>, String> {
        Err(format!("'{}' is not an output transport", spec.transport))
    }

    /// Lets go of what the connector keeps in another system for a
    /// pipeline (`pipeline_id`) whose state is being dropped (the pipeline
    /// deleted, or its storage cleared), such as a replication slot that
    /// would otherwise hold the source's WAL; nothing by default.
    fn release(
        &self,
        _spec: &ConnectorSpec,
        _pipeline_id: &str,
        _files: &FileAccess,
    ) -> Result<(), String> {
        Ok(())
    }
}

/// A transport's configuration as itself, for the transports that look
/// at each other's (every `Transport` has it).
pub trait AsAny {
    /// Itself, to downcast.
    fn as_any(&self) -> &dyn Any;
}

impl<T: Any> AsAny for T {
    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// A transport in the registry.
pub struct Registered {
    /// Its name, as written in a connector.
    pub name: &'static str,
    /// Which way it goes.
    pub direction: Direction,
    /// The formats it carries (JSON when none is given); empty when it
    /// makes typed rows itself (a format given is then not used).
    pub formats: &'static [FormatKind],
    /// Whether it writes by the view's key (`"index"`).
    pub keyed: bool,
    /// Reads its configuration.
    read: fn(Value) -> Result<Arc<dyn Transport>, String>,
}

fn read<T: Transport + DeserializeOwned + 'static>(
    config: Value,
) -> Result<Arc<dyn Transport>, String> {
    let config = match config {
        Value::Null => json!({}),
        v @ Value::Object(_) => v,
        // serde would read a struct from a list as well.
        other => return Err(format!("config must be an object, not {other}")),
    };
    match serde_path_to_error::deserialize::<_, T>(config) {
        Ok(t) => Ok(Arc::new(t)),
        // The field that does not read, by its path in the config.
        Err(e) if e.path().iter().next().is_some() => Err(format!("'{}': {}", e.path(), e.inner())),
        Err(e) => Err(e.into_inner().to_string()),
    }
}

use FormatKind::{Avro, Csv, Json, Parquet, Raw};

/// Every transport.
pub const TRANSPORTS: &[Registered] = &[
    Registered {
        name: "file_input",
        direction: Direction::Input,
        formats: &[Json, Csv, Parquet, Raw],
        keyed: false,
        read: read::<file::FileInput>,
    },
    Registered {
        name: "url_input",
        direction: Direction::Input,
        formats: &[Json, Csv, Raw],
        keyed: false,
        read: read::<url::UrlInput>,
    },
    Registered {
        name: "datagen",
        direction: Direction::Input,
        formats: &[],
        keyed: false,
        read: read::<datagen::DatagenConfig>,
    },
    Registered {
        name: "kafka_input",
        direction: Direction::Input,
        formats: &[Json, Csv, Avro, Raw],
        keyed: false,
        read: read::<kafka::KafkaInput>,
    },
    Registered {
        name: "s3_input",
        direction: Direction::Input,
        formats: &[Json, Csv, Parquet, Raw],
        keyed: false,
        read: read::<s3::source::S3Input>,
    },
    Registered {
        name: "postgres_input",
        direction: Direction::Input,
        formats: &[],
        keyed: false,
        read: read::<postgres::query::PostgresInput>,
    },
    Registered {
        name: "postgres_cdc_input",
        direction: Direction::Input,
        formats: &[],
        keyed: false,
        read: read::<postgres::cdc::PostgresCdcInput>,
    },
    Registered {
        name: "delta_table_input",
        direction: Direction::Input,
        formats: &[],
        keyed: false,
        read: read::<delta::source::DeltaInput>,
    },
    Registered {
        name: "iceberg_input",
        direction: Direction::Input,
        formats: &[],
        keyed: false,
        read: read::<iceberg::source::IcebergInput>,
    },
    Registered {
        name: "nexmark",
        direction: Direction::Input,
        formats: &[],
        keyed: false,
        read: read::<nexmark::NexmarkConfig>,
    },
    Registered {
        name: "file_output",
        direction: Direction::Output,
        formats: &[Json, Csv, Parquet],
        keyed: false,
        read: read::<file::FileOutput>,
    },
    Registered {
        name: "kafka_output",
        direction: Direction::Output,
        formats: &[Json, Csv, Avro],
        keyed: false,
        read: read::<kafka::KafkaOutput>,
    },
    Registered {
        name: "s3_output",
        direction: Direction::Output,
        formats: &[Json, Csv, Parquet],
        keyed: false,
        read: read::<s3::sink::S3Output>,
    },
    Registered {
        name: "postgres_output",
        direction: Direction::Output,
        formats: &[],
        keyed: true,
        read: read::<postgres::output::PostgresOutput>,
    },
    Registered {
        name: "delta_table_output",
        direction: Direction::Output,
        formats: &[],
        keyed: true,
        read: read::<delta::sink::DeltaOutput>,
    },
    Registered {
        name: "redis_output",
        direction: Direction::Output,
        formats: &[Json],
        keyed: false,
        read: read::<redis_output::RedisOutput>,
    },
];

/// Reads a connector's position from a checkpoint: `T`'s default (the
/// input's start) when there is none, or `{}` (state that holds nothing of
/// the input yet).
pub fn position<T: DeserializeOwned + Default>(v: Option<&Value>) -> Result<T, String> {
    match v {
        None => Ok(T::default()),
        Some(Value::Object(m)) if m.is_empty() => Ok(T::default()),
        Some(v) => serde_json::from_value(v.clone())
            .map_err(|e| format!("the checkpoint's position {v}: {e}")),
    }
}

/// Puts `position` into the state without a row (an empty change that
/// carries it): a start chosen at the first read (a table's latest
/// version or current snapshot) is then what a checkpoint holds, so that
/// a pipeline resumed from it does not choose again, later, and skip what
/// was committed in between. False if the pipeline is stopping.
pub fn record_position(feeder: &Feeder, spec: &ConnectorSpec, position: Value) -> bool {
    let Ok(schema) = feeder.schema(&spec.relation).cloned() else {
        return false;
    };
    let origin = Origin::at(&spec.name, position);
    feeder
        .feed_blocking(&spec.relation, ZSet::empty(&schema), origin)
        .is_ok()
}

/// Opens an output connector of a view.
pub fn open_output(spec: &ConnectorSpec, cx: OutputContext<'_>) -> Result<Box<dyn Sink>, String> {
    spec.config.open_output(spec, cx)
}

/// Releases what the connectors keep elsewhere for a pipeline whose state
/// is dropped (see [`Transport::release`]), on a thread of its own so that
/// the request that dropped it does not wait on another system. A
/// connector that cannot is logged with what is left behind.
pub fn release(
    connectors: Vec<ConnectorSpec>,
    pipeline: &str,
    pipeline_id: &str,
    files: FileAccess,
) {
    let (pipeline, pipeline_id) = (pipeline.to_string(), pipeline_id.to_string());
    let run = move || {
        for spec in &connectors {
            if let Err(e) = spec.config.release(spec, &pipeline_id, &files) {
                tracing::warn!(pipeline = %pipeline, connector = %spec.name, error = %e, "what the connector keeps for the pipeline elsewhere could not be released");
            }
        }
    };
    if let Err(e) = std::thread::Builder::new()
        .name("eddy-release".into())
        .spawn(run)
    {
        tracing::warn!(error = %e, "releasing connectors' resources");
    }
}

/// Starts an input connector's thread (none for a connector another one
/// runs: the nexmark generator is run by the `bid` table's connector for
/// all three of the program's `connectors`). `position` is as in
/// [`InputContext::position`].
pub fn start_input(
    spec: &ConnectorSpec,
    connectors: &[ConnectorSpec],
    feeder: Arc<Feeder>,
    (pipeline, pipeline_id): (&str, &str),
    files: &FileAccess,
    position: Option<&Value>,
) -> Result<Option<JoinHandle<()>>, String> {
    let cx = InputContext {
        connectors,
        feeder: &feeder,
        stats: feeder.stats.input(&spec.name, &spec.relation),
        pipeline,
        pipeline_id,
        files,
        position,
    };
    let Some(run) = spec.config.start_input(spec, cx)? else {
        return Ok(None);
    };
    // The connector's lines are the pipeline's log's.
    let span = tracing::info_span!("input", pipeline = %pipeline, connector = %spec.name);
    std::thread::Builder::new()
        .name(format!("eddy-{pipeline}-in"))
        .spawn(move || span.in_scope(run))
        .map(Some)
        .map_err(|e| e.to_string())
}
