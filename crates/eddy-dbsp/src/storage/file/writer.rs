//! The writer of batch files: entries in order to data, offsets and
//! weights (spooled to temporary files, so a merge holds no array in
//! memory), then fences, filter and checksums (see the layout in
//! [`super`]), under a temporary name renamed when complete.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::super::{storage_error, Storage};
use super::{filter_for, Fences, FileBatch, BLOCK, END, FENCE, MAGIC};
use crate::storage::bloom::Bloom;
use crate::Result;

/// CRC-32 of each `BLOCK` bytes of a stream.
#[derive(Default)]
struct Checksums {
    hasher: crc32fast::Hasher,
    in_block: usize,
    blocks: Vec<u32>,
}

impl Checksums {
    fn update(&mut self, mut bytes: &[u8]) {
        while !bytes.is_empty() {
            let take = (BLOCK - self.in_block).min(bytes.len());
            self.hasher.update(&bytes[..take]);
            self.in_block += take;
            bytes = &bytes[take..];
            if self.in_block == BLOCK {
                self.finish_block();
            }
        }
    }

    fn finish_block(&mut self) {
        let hasher = std::mem::take(&mut self.hasher);
        self.blocks.push(hasher.finalize());
        self.in_block = 0;
    }

    fn finish(mut self) -> Vec<u32> {
        if self.in_block > 0 {
            self.finish_block();
        }
        self.blocks
    }
}

/// A temporary file that collects one array of a batch file while its
/// data is written (so a large merge keeps no array in memory).
struct Spool {
    path: PathBuf,
    out: BufWriter<File>,
}

impl Spool {
    fn create(path: PathBuf) -> Result<Self> {
        let file = File::create(&path).map_err(|e| storage_error(&path, e))?;
        Ok(Self {
            out: BufWriter::with_capacity(1 << 16, file),
            path,
        })
    }

    fn put(&mut self, v: u64) -> Result<()> {
        self.out
            .write_all(&v.to_le_bytes())
            .map_err(|e| storage_error(&self.path, e))
    }
}

/// Adds a value to a spool of an unfinished writer.
fn put(spool: &mut Option<Spool>, v: u64) -> Result<()> {
    spool.as_mut().expect("an unfinished writer").put(v)
}

impl Drop for Spool {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Writes a batch file entry by entry (entries in order, consolidated):
/// keys and rows stream to the file, offsets and weights to spool files
/// that [`finish`](Self::finish) appends.
pub(crate) struct BatchWriter {
    /// The storage the file belongs to (none for a checkpoint's copy).
    storage: Option<Arc<Storage>>,
    /// Taken by `finish`.
    out: Option<BufWriter<File>>,
    path: PathBuf,
    temporary: PathBuf,
    /// The offsets and the weights, until `finish` takes them.
    offsets: Option<Spool>,
    weights: Option<Spool>,
    n: u64,
    data_len: u64,
    crc: Checksums,
    fences: Fences,
    bloom: Bloom,
    /// The key of the last entry pushed (the filter takes each key once).
    last_key: Option<Vec<u8>>,
}

impl BatchWriter {
    /// A writer of the file `path`, counted in `storage` if it belongs to
    /// one, of at most about `keys` distinct keys (the size of its Bloom
    /// filter; 0 for a file that needs none, such as a checkpoint's copy).
    /// Its temporary files sit beside it.
    pub(crate) fn create(
        path: PathBuf,
        storage: Option<Arc<Storage>>,
        keys: usize,
    ) -> Result<Self> {
        let temporary = path.with_extension("tmp");
        let file = File::create(&temporary).map_err(|e| storage_error(&temporary, e))?;
        let spool = |what: &str| Spool::create(path.with_extension(format!("{what}.tmp")));
        let (offsets, weights) = (spool("offsets")?, spool("weights")?);
        let mut w = BatchWriter {
            storage,
            out: Some(BufWriter::with_capacity(1 << 20, file)),
            path,
            temporary,
            offsets: Some(offsets),
            weights: Some(weights),
            n: 0,
            data_len: 0,
            crc: Checksums::default(),
            fences: Fences::default(),
            bloom: filter_for(keys),
            last_key: None,
        };
        put(&mut w.offsets, 0)?;
        // The header: the counts are known only at the end, so they are
        // kept before the checksums; these 16 bytes are reserved.
        w.write(MAGIC)?;
        w.write(&[0u8; 16])?;
        Ok(w)
    }

    fn write(&mut self, bytes: &[u8]) -> Result<()> {
        self.crc.update(bytes);
        let out = self.out.as_mut().expect("an unfinished writer");
        out.write_all(bytes)
            .map_err(|e| storage_error(&self.temporary, e))
    }

    /// Appends one entry.
    pub(crate) fn push(&mut self, key: &[u8], row: &[u8], weight: i64) -> Result<()> {
        if self.n.is_multiple_of(FENCE as u64) {
            self.fences.push(key, row);
        }
        if self.bloom.is_active() && self.last_key.as_deref() != Some(key) {
            self.bloom.insert(key);
            let last = self.last_key.get_or_insert_with(Vec::new);
            last.clear();
            last.extend_from_slice(key);
        }
        self.write(key)?;
        self.data_len += key.len() as u64;
        put(&mut self.offsets, self.data_len)?;
        self.write(row)?;
        self.data_len += row.len() as u64;
        put(&mut self.offsets, self.data_len)?;
        put(&mut self.weights, weight as u64)?;
        self.n += 1;
        Ok(())
    }

    /// Appends a spool's contents to the file.
    fn append(&mut self, mut spool: Spool) -> Result<()> {
        spool
            .out
            .flush()
            .map_err(|e| storage_error(&spool.path, e))?;
        let mut file = File::open(&spool.path).map_err(|e| storage_error(&spool.path, e))?;
        let mut buffer = vec![0u8; 1 << 16];
        loop {
            let read = std::io::Read::read(&mut file, &mut buffer)
                .map_err(|e| storage_error(&spool.path, e))?;
            if read == 0 {
                return Ok(());
            }
            self.write(&buffer[..read])?;
        }
    }

    /// Completes the file (trailer, sync, rename) and opens it.
    pub(crate) fn finish(mut self) -> Result<Arc<FileBatch>> {
        let pad = (8 - (self.data_len % 8) as usize) % 8;
        self.write(&[0u8; 8][..pad])?;
        let temporary = self.temporary.clone();
        for spool in [self.offsets.take(), self.weights.take()] {
            self.append(spool.expect("an unfinished writer"))?;
        }
        // The fences and the filter, so that opening the file later reads
        // them instead of scanning it.
        let fences = std::mem::take(&mut self.fences);
        let fence_pad = (8 - fences.bytes.len() % 8) % 8;
        self.write(&fences.bytes)?;
        self.write(&[0u8; 8][..fence_pad])?;
        let ends: Vec<u8> = (fences.ends.iter())
            .flat_map(|&(k, r)| [k as u64, r as u64])
            .flat_map(u64::to_le_bytes)
            .collect();
        self.write(&ends)?;
        let bloom = std::mem::take(&mut self.bloom);
        let words: Vec<u8> = bloom.words().iter().flat_map(|w| w.to_le_bytes()).collect();
        self.write(&words)?;
        let counts: Vec<u8> = [
            self.n,
            self.data_len,
            fences.bytes.len() as u64,
            fences.ends.len() as u64,
            bloom.words().len() as u64,
        ]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
        self.write(&counts)?;
        let crc = std::mem::take(&mut self.crc).finish();
        let mut trailer: Vec<u8> = crc.iter().flat_map(|c| c.to_le_bytes()).collect();
        if !trailer.len().is_multiple_of(8) {
            trailer.extend_from_slice(&[0u8; 4]);
        }
        trailer.extend_from_slice(&(crc.len() as u64).to_le_bytes());
        trailer.extend_from_slice(END);
        let mut out = self.out.take().expect("an unfinished writer");
        out.write_all(&trailer)
            .map_err(|e| storage_error(&temporary, e))?;
        let file = out.into_inner().map_err(|e| storage_error(&temporary, e))?;
        file.sync_all().map_err(|e| storage_error(&temporary, e))?;
        std::fs::rename(&temporary, &self.path).map_err(|e| storage_error(&self.path, e))?;
        let batch = FileBatch::load(&self.path, self.storage.clone(), Some((fences, bloom)))?;
        if let Some(s) = &self.storage {
            s.written.fetch_add(batch.size(), Ordering::Relaxed);
        }
        Ok(batch)
    }
}

impl Drop for BatchWriter {
    fn drop(&mut self) {
        // An unfinished file (an error midway) is removed; a finished one
        // was renamed away and this fails harmlessly.
        let _ = std::fs::remove_file(&self.temporary);
    }
}
