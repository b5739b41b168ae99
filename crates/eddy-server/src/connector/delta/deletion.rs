//! Deletion vectors: the rows of a Delta table's data file deleted without
//! rewriting the file (Spark's and Databricks' `DELETE`, `UPDATE` and
//! `MERGE` write them by default). A file's `add` (and a `remove` of it)
//! names one by a descriptor: inline in the log, or at an offset of a file
//! beside the table's data. The rows it holds are the indexes, from 0, of
//! the deleted rows in the Parquet file.
//!
//! Delta's kernel (the crate delta-rs is built on) frames and checks the
//! vector (its version, size, magic and CRC) and decodes its roaring
//! bitmap; this module fetches its bytes from the table's store, which the
//! kernel's storage layer does not know.

use std::sync::Arc;

use bytes::Bytes;
use delta_kernel::actions::deletion_vector::DeletionVectorDescriptor as KernelDescriptor;
use delta_kernel::{DeltaResult, Error as KernelError, FileMeta, FileSlice, StorageHandler};
use deltalake_core::kernel::DeletionVectorDescriptor;
use deltalake_core::logstore::object_store::path::Path as ObjectPath;
use deltalake_core::logstore::object_store::{ObjectStore, ObjectStoreExt};
use roaring::RoaringTreemap;
use url::Url;

use crate::connector::blocking::block_on;
use crate::connector::rounds::Failure;

/// The rows `dv` deletes, read from `store`, the table's store rooted at
/// `root` (its URL). A vector that cannot be fetched is tried again; one
/// that does not decode, or lies outside the table, is fatal: reading the
/// file without it would feed rows that were deleted.
pub fn read(
    dv: &DeletionVectorDescriptor,
    root: &Url,
    store: Arc<dyn ObjectStore>,
) -> Result<RoaringTreemap, Failure> {
    let bad = |e: KernelError| Failure::Fatal(format!("a deletion vector: {e}"));
    let dv = KernelDescriptor::try_from(dv.clone()).map_err(bad)?;
    let root = folder(root);
    let bytes = match dv.absolute_path(&root).map_err(bad)? {
        None => Bytes::new(),
        Some(url) => {
            let Some(relative) = url.as_str().strip_prefix(root.as_str()) else {
                return Err(Failure::Fatal(format!(
                    "a deletion vector at '{url}', outside the table '{root}', is not read"
                )));
            };
            let path = ObjectPath::from_url_path(relative)
                .map_err(|e| Failure::Fatal(format!("a deletion vector's path '{url}': {e}")))?;
            let at = path.clone();
            block_on(async move { store.get(&at).await?.bytes().await })
                .map_err(|e| Failure::Retry(format!("reading the deletion vector '{path}': {e}")))?
        }
    };
    dv.read(Arc::new(Fetched(bytes)), &root).map_err(bad)
}

/// `url` as a folder (ending in `/`), so that names join beneath it.
fn folder(url: &Url) -> Url {
    let mut url = url.clone();
    if !url.path().ends_with('/') {
        let path = format!("{}/", url.path());
        url.set_path(&path);
    }
    url
}

/// The one file the kernel is asked for, fetched before.
struct Fetched(Bytes);

impl StorageHandler for Fetched {
    fn read_files(
        &self,
        files: Vec<FileSlice>,
    ) -> DeltaResult<Box<dyn Iterator<Item = DeltaResult<Bytes>>>> {
        let bytes = self.0.clone();
        Ok(Box::new(files.into_iter().map(move |_| Ok(bytes.clone()))))
    }

    fn list_from(&self, _: &Url) -> DeltaResult<Box<dyn Iterator<Item = DeltaResult<FileMeta>>>> {
        Err(unused())
    }

    fn copy_atomic(&self, _: &Url, _: &Url) -> DeltaResult<()> {
        Err(unused())
    }

    fn put(&self, _: &Url, _: Bytes, _: bool) -> DeltaResult<()> {
        Err(unused())
    }

    fn head(&self, _: &Url) -> DeltaResult<FileMeta> {
        Err(unused())
    }

    fn delete(&self, _: &Url) -> DeltaResult<()> {
        Err(unused())
    }
}

fn unused() -> KernelError {
    KernelError::generic("a deletion vector is read from bytes fetched before")
}

#[cfg(test)]
mod tests {
    use super::*;
    use deltalake_core::kernel::StorageType;
    use deltalake_core::logstore::object_store::memory::InMemory;

    /// A vector as Delta's writers frame it, by the kernel's writer.
    fn framed(rows: &[u64]) -> (Vec<u8>, i32, i32) {
        use delta_kernel::actions::deletion_vector_writer::{
            KernelDeletionVector, StreamingDeletionVectorWriter,
        };
        let mut out = Vec::new();
        let mut writer = StreamingDeletionVectorWriter::new(&mut out);
        let mut dv = KernelDeletionVector::new();
        dv.add_deleted_row_indexes(rows.iter().copied());
        let done = writer.write_deletion_vector(dv).unwrap();
        writer.finalize().unwrap();
        (out, done.offset, done.size_in_bytes)
    }

    fn descriptor(
        storage_type: StorageType,
        path: &str,
        offset: i32,
        size: i32,
    ) -> DeletionVectorDescriptor {
        DeletionVectorDescriptor {
            storage_type,
            path_or_inline_dv: path.to_string(),
            offset: Some(offset),
            size_in_bytes: size,
            cardinality: 3,
        }
    }

    #[test]
    fn vectors_are_read_from_beside_the_table() {
        let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
        let (bytes, offset, size) = framed(&[1, 4, 7]);
        block_on({
            let store = Arc::clone(&store);
            async move {
                store
                    .put(&ObjectPath::from("dv/rows.bin"), bytes.into())
                    .await
            }
        })
        .unwrap();
        let root = Url::parse("s3://lake/items").unwrap();
        let dv = descriptor(
            StorageType::AbsolutePath,
            "s3://lake/items/dv/rows.bin",
            offset,
            size,
        );
        let rows = read(&dv, &root, Arc::clone(&store)).unwrap();
        assert_eq!(rows.iter().collect::<Vec<_>>(), [1, 4, 7]);

        // A vector elsewhere is not fetched.
        let outside = descriptor(
            StorageType::AbsolutePath,
            "s3://lake/other/rows.bin",
            offset,
            size,
        );
        assert!(
            matches!(read(&outside, &root, Arc::clone(&store)), Err(Failure::Fatal(e)) if e.contains("outside"))
        );
        // A size the file does not hold is refused by the kernel's checks.
        let wrong = descriptor(
            StorageType::AbsolutePath,
            "s3://lake/items/dv/rows.bin",
            offset,
            size + 1,
        );
        assert!(matches!(
            read(&wrong, &root, Arc::clone(&store)),
            Err(Failure::Fatal(_))
        ));
        // One not there yet is tried again.
        let missing = descriptor(
            StorageType::AbsolutePath,
            "s3://lake/items/dv/none.bin",
            offset,
            size,
        );
        assert!(matches!(
            read(&missing, &root, store),
            Err(Failure::Retry(_))
        ));
    }
}
