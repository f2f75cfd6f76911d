//! CPU work a caller can make us do for free (parsing, guarding, compiling, serializing
//! and dropping what a request carries) runs on tokio's blocking pool, so the async
//! threads keep answering `/healthz` and everyone else meanwhile.

use std::sync::{Arc, OnceLock};

use tokio::sync::Semaphore;

/// Work of this kind running at once: one per core. Past it, requests wait their turn
/// (asleep, costing nothing), so a flood of large bodies holds at most this many parsed
/// at a time and leaves the async threads their share of the cores.
fn slots() -> &'static Arc<Semaphore> {
    static SLOTS: OnceLock<Arc<Semaphore>> = OnceLock::new();
    SLOTS.get_or_init(|| {
        let cores = std::thread::available_parallelism().map_or(2, std::num::NonZero::get);
        Arc::new(Semaphore::new(cores))
    })
}

/// Runs `work` on the blocking pool, in its turn, and waits for it. The turn is held by
/// the work itself, so a caller that goes away does not free it early.
pub async fn off_thread<T: Send + 'static>(work: impl FnOnce() -> T + Send + 'static) -> T {
    let turn = slots().clone().acquire_owned().await;
    let work = move || {
        let _turn = turn;
        work()
    };
    match tokio::task::spawn_blocking(work).await {
        Ok(v) => v,
        Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
        Err(e) => panic!("the blocking pool dropped a task: {e}"),
    }
}

/// Holds a value that may be costly to drop (a purchase carrying up to a megabyte of
/// parsed JSON) and drops it on the blocking pool, whichever way the request ends.
pub struct DropOffThread<T: Send + 'static>(Option<T>);

impl<T: Send + 'static> DropOffThread<T> {
    pub fn new(value: T) -> Self {
        DropOffThread(Some(value))
    }
}

impl<T: Send + 'static> std::ops::Deref for DropOffThread<T> {
    type Target = T;
    fn deref(&self) -> &T {
        match &self.0 {
            Some(v) => v,
            // Only `drop` takes the value out.
            None => unreachable!("a DropOffThread is read after its drop"),
        }
    }
}

impl<T: Send + 'static> Drop for DropOffThread<T> {
    fn drop(&mut self) {
        if let Some(v) = self.0.take()
            && let Ok(runtime) = tokio::runtime::Handle::try_current()
        {
            runtime.spawn_blocking(move || drop(v));
        }
    }
}
