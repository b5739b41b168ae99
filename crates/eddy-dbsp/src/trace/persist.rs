//! A trace in a checkpoint: [`Trace::save`] links the batch files and
//! defers writing the batches in memory; [`Trace::restore`] adopts or reads
//! them back, keeping only a shard's keys while a state is re-split.

use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use super::batch::{Batch, MemBatch};
use super::{RouteKey, Slot, Trace};
use crate::checkpoint::{StateReader, StateWriter};
use crate::storage::{BatchWriter, Scan};
use crate::Result;

impl Trace {
    /// Writes the trace to a checkpoint: a link to each batch in a file,
    /// and, written after the cut, a new file for each batch in memory and
    /// for the buffered updates (copied into a batch at the cut).
    pub fn save(&self, w: &mut StateWriter) -> Result<()> {
        fn defer(w: &mut StateWriter, m: Arc<MemBatch>) -> Result<String> {
            w.defer_batch(move |path| {
                let mut writer = BatchWriter::create(path.to_path_buf(), None, 0)?;
                for i in 0..m.len() {
                    let (k, r, weight) = m.entry(i);
                    writer.push(k, r, weight)?;
                }
                Ok(writer.finish()?.size())
            })
        }
        let buffered = self.consolidated_buffer();
        w.put(&(self.batches().count() + usize::from(!buffered.is_empty())))?;
        for batch in self.batches() {
            let name = match batch {
                Batch::File(f) => w.link_batch(f)?,
                Batch::Memory(m) => defer(w, Arc::clone(m))?,
            };
            w.put(&name)?;
        }
        if !buffered.is_empty() {
            let name = defer(w, Arc::new(MemBatch::from_sorted(buffered.into_iter())))?;
            w.put(&name)?;
        }
        Ok(())
    }

    /// Replaces the trace's contents with those [`save`](Self::save)d in a
    /// checkpoint. Large batch files are adopted by the trace's storage;
    /// the others (and all of them without storage) are read into memory.
    /// While a state is re-split ([`StateReader::routed`]), only the
    /// entries whose key the reader [`keeps`](StateReader::keeps) are kept
    /// and, when it is [`merging`](StateReader::merging), added to the
    /// trace's contents.
    pub fn restore(&mut self, r: &mut StateReader) -> Result<()> {
        self.restore_routed(r, None)
    }

    /// [`restore`](Self::restore) for a trace whose keys are not the keys
    /// its operator routes rows by: `route_key` gives the route of a key
    /// (its partition's key, for a key of partition and order).
    pub fn restore_routed(
        &mut self,
        r: &mut StateReader,
        route_key: Option<RouteKey<'_>>,
    ) -> Result<()> {
        if !r.routed() {
            return self.read_batches(r);
        }
        let mut part = Trace {
            storage: self.storage.clone(),
            // The kept part is written with a key filter, as the batches
            // it comes from may have been (an operator's trace is read by
            // key, or its files would carry none).
            lookups: AtomicBool::new(true),
            ..Trace::new()
        };
        part.read_batches(r)?;
        if r.filters() {
            let failed = std::cell::RefCell::new(None);
            part.retain_keys(|k| match route_key {
                None => r.keeps(k),
                Some(route) => match route(k) {
                    Ok(key) => r.keeps(&key),
                    Err(e) => {
                        failed.borrow_mut().get_or_insert(e);
                        true
                    }
                },
            });
            if let Some(e) = failed.into_inner() {
                return Err(e);
            }
        }
        if !r.merging() {
            self.clear();
        }
        self.reads.clear();
        self.slots.append(&mut part.slots);
        Ok(())
    }

    /// Reads the batches [`save`](Self::save) listed into an empty trace.
    fn read_batches(&mut self, r: &mut StateReader) -> Result<()> {
        let n: usize = r.get()?;
        let mut batches = Vec::new();
        for _ in 0..n {
            let name: String = r.get()?;
            let (file, adopted) = r.batch(&name, self.storage.as_ref())?;
            batches.push(if adopted {
                Batch::File(file)
            } else {
                let mut batch = MemBatch::new();
                let mut scan = Scan::new(&file)?;
                while let Some((_, (k, r, w))) = scan.peek() {
                    batch.push(k, r, w);
                    scan.advance()?;
                }
                Batch::Memory(Arc::new(batch))
            });
        }
        self.reads.clear();
        self.slots = batches.into_iter().map(Slot::Ready).collect();
        self.buffer.clear();
        self.buffer_bytes.clear();
        Ok(())
    }
}
