//! Background merges: a storage's merger thread runs the merges of large
//! batches off the step's critical path.
//!
//! A trace that would merge two batches into a file hands the work to its
//! storage's merger thread (`Storage::merge_in_background`) and keeps
//! reading the two batches until the merged one is ready, so a large merge
//! never stalls a step. Each storage (one per pipeline, whose circuit runs
//! on one worker thread) has one merger thread, started on first use and
//! ended when the storage is dropped; merges run in the order they were
//! asked for. (Merges in memory stay in the step: on this 2-core machine
//! handing them to a thread raised Nexmark's peak memory by up to 2.6× and
//! lowered its throughput, see benches/RESULTS.md.)
//!
//! A [`Merge`] is the handle of one such merge. Dropping what waits for it
//! [`cancel`](Merge::cancel)s it: a merge not yet begun never runs, one
//! running stops at its next check and removes its unfinished file, and a
//! finished result is dropped there and then (its file goes with it), so
//! no file outlives the trace that asked for it.

use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{channel, Sender};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

/// A unit of work for a merger thread.
type Job = Box<dyn FnOnce() + Send>;

/// A merge's work, given the check of its cancellation.
type Work<T> = Box<dyn FnOnce(&dyn Fn() -> bool) -> Option<T> + Send>;

/// A storage's merger thread, started on first use.
#[derive(Default)]
pub(crate) struct Merger {
    jobs: Mutex<Option<Sender<Job>>>,
}

impl Merger {
    /// Queues `job` on the merger thread; gives it back when no thread
    /// could be started, so the caller runs it itself.
    fn submit(&self, job: Job) -> Option<Job> {
        let mut jobs = self.jobs.lock().unwrap_or_else(|e| e.into_inner());
        if jobs.is_none() {
            let (tx, rx) = channel::<Job>();
            let spawned = std::thread::Builder::new()
                .name("eddy-merger".into())
                .spawn(move || {
                    // Ends when the storage (and with it the sender) is dropped.
                    while let Ok(job) = rx.recv() {
                        job();
                    }
                });
            if spawned.is_err() {
                return Some(job);
            }
            *jobs = Some(tx);
        }
        let tx = jobs.as_ref().expect("started above");
        tx.send(job).err().map(|e| e.0)
    }

    /// Runs `work` on the merger thread and returns its handle. `work` is
    /// given a check that turns true once the merge is cancelled (it
    /// should then stop and return `None`); a `work` that panics counts as
    /// failed (`None`).
    pub(crate) fn run<T: Send + 'static>(
        &self,
        work: impl FnOnce(&dyn Fn() -> bool) -> Option<T> + Send + 'static,
    ) -> Arc<Merge<T>> {
        let merge = Arc::new(Merge {
            state: Mutex::new(State::Queued(Box::new(work))),
            done: Condvar::new(),
            cancel: AtomicBool::new(false),
        });
        let handle = Arc::clone(&merge);
        let job: Job = Box::new(move || {
            let work = {
                let mut state = handle.lock();
                match std::mem::replace(&mut *state, State::Running) {
                    State::Queued(work) => work,
                    finished => {
                        *state = finished; // cancelled before it began
                        return;
                    }
                }
            };
            let cancelled = || handle.cancel.load(Ordering::Relaxed);
            let result = std::panic::catch_unwind(AssertUnwindSafe(|| work(&cancelled)))
                .ok()
                .flatten();
            *handle.lock() = State::Finished(result);
            handle.done.notify_all();
        });
        if let Some(job) = self.submit(job) {
            job();
        }
        merge
    }
}

/// Where a merge stands.
enum State<T> {
    /// Waiting for the thread, with the work (and what it holds, dropped
    /// at once if the merge is cancelled).
    Queued(Work<T>),
    Running,
    /// The result (`None`: failed or cancelled), until it is taken.
    Finished(Option<T>),
}

/// The handle of a merge run by a merger thread.
pub(crate) struct Merge<T> {
    state: Mutex<State<T>>,
    done: Condvar,
    cancel: AtomicBool,
}

impl<T> Merge<T> {
    fn lock(&self) -> MutexGuard<'_, State<T>> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Waits until the merge has finished (without taking its result).
    fn wait_finished(&self) -> MutexGuard<'_, State<T>> {
        let mut state = self.lock();
        while !matches!(*state, State::Finished(_)) {
            state = self.done.wait(state).unwrap_or_else(|e| e.into_inner());
        }
        state
    }

    /// The merge's result once it has finished (`Some(None)`: it failed,
    /// the caller keeps what it had), taken; `None` while it runs.
    pub(crate) fn poll(&self) -> Option<Option<T>> {
        match &mut *self.lock() {
            State::Finished(result) => Some(result.take()),
            _ => None,
        }
    }

    /// Blocks until the merge has finished (its result stays to be
    /// [`poll`](Self::poll)ed).
    pub(crate) fn wait(&self) {
        drop(self.wait_finished());
    }

    /// Cancels the merge: one not yet begun never runs; one running is
    /// asked to stop and waited for. Returns the result if the merge had
    /// finished anyway, so that the caller drops it now.
    pub(crate) fn cancel(&self) -> Option<T> {
        let mut state = self.lock();
        if matches!(*state, State::Queued(_)) {
            let queued = std::mem::replace(&mut *state, State::Finished(None));
            drop(state);
            drop(queued);
            return None;
        }
        self.cancel.store(true, Ordering::Relaxed);
        drop(state);
        match &mut *self.wait_finished() {
            State::Finished(result) => result.take(),
            _ => unreachable!("waited until finished"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc::sync_channel;

    #[test]
    fn a_merge_runs_off_the_callers_thread_and_is_polled() {
        let merger = Merger::default();
        let caller = std::thread::current().id();
        let merge = merger.run(move |_| Some(std::thread::current().id() != caller));
        merge.wait();
        assert_eq!(merge.poll(), Some(Some(true)));
        // Taken: a second poll finds nothing left.
        assert_eq!(merge.poll(), Some(None));
    }

    #[test]
    fn a_queued_merge_cancelled_never_runs() {
        let merger = Merger::default();
        let (release, gate) = sync_channel::<()>(0);
        // The first merge holds the thread until released.
        let first = merger.run(move |_| gate.recv().ok());
        let ran = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&ran);
        let second = merger.run(move |_| {
            flag.store(true, Ordering::Relaxed);
            Some(())
        });
        assert_eq!(second.cancel(), None);
        release.send(()).unwrap();
        first.wait();
        let third = merger.run(|_| Some(()));
        third.wait();
        assert!(!ran.load(Ordering::Relaxed));
    }

    #[test]
    fn a_running_merge_cancelled_stops_at_its_next_check() {
        let merger = Merger::default();
        let (started, running) = sync_channel::<()>(1);
        let merge = merger.run(move |cancelled| {
            started.send(()).unwrap();
            while !cancelled() {
                std::thread::yield_now();
            }
            None::<()>
        });
        running.recv().unwrap();
        assert_eq!(merge.cancel(), None);
        assert_eq!(merge.poll(), Some(None));
    }

    #[test]
    fn a_merge_that_panics_fails_without_taking_the_thread() {
        let merger = Merger::default();
        let bad = merger.run(|_| -> Option<u8> { panic!("a bad merge") });
        bad.wait();
        assert_eq!(bad.poll(), Some(None));
        let good = merger.run(|_| Some(7u8));
        good.wait();
        assert_eq!(good.poll(), Some(Some(7)));
    }
}
