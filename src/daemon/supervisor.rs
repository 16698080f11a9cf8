//! The supervisor: owns every thread and async task the daemon starts. Each has a name; one
//! shutdown signal reaches all of them; `stop` signals, runs the stoppers (UDP workers, XDP)
//! and joins everything. A task or thread that ends before shutdown (or panics) is logged and
//! counted in [`SupervisorStatus`] (shown in status and metrics), never silently gone.

use std::future::Future;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

pub use crate::metrics::supervisor::SupervisorStatus;

/// The one shutdown signal, for threads (`sleep`) and tasks (`stopped`).
#[derive(Clone)]
pub struct Shutdown {
    flag: Arc<(Mutex<bool>, Condvar)>,
    watch: tokio::sync::watch::Sender<bool>,
}

impl Shutdown {
    fn new() -> Shutdown {
        Shutdown {
            flag: Arc::new((Mutex::new(false), Condvar::new())),
            watch: tokio::sync::watch::Sender::new(false),
        }
    }

    /// Whether shutdown was asked for.
    pub fn is_set(&self) -> bool {
        *self.watch.borrow()
    }

    /// Sleeps up to `pause`; true when shutdown was asked for (the caller returns then).
    pub fn sleep(&self, pause: Duration) -> bool {
        let (lock, wake) = &*self.flag;
        let Ok(guard) = lock.lock() else {
            return true;
        };
        match wake.wait_timeout_while(guard, pause, |stopped| !*stopped) {
            Ok((stopped, _)) => *stopped,
            Err(_) => true,
        }
    }

    /// Resolves once shutdown is asked for.
    pub async fn stopped(&self) {
        let mut receiver = self.watch.subscribe();
        let _ = receiver.wait_for(|stopped| *stopped).await;
    }

    fn set(&self) {
        // The watch first: a thread woken below checks `is_set` as it ends.
        self.watch.send_replace(true);
        let (lock, wake) = &*self.flag;
        if let Ok(mut stopped) = lock.lock() {
            *stopped = true;
        }
        wake.notify_all();
    }
}

/// The threads and tasks of one daemon, and the runtime the tasks run on.
pub struct Supervisor {
    runtime: Option<tokio::runtime::Runtime>,
    shutdown: Shutdown,
    status: Arc<SupervisorStatus>,
    tasks: Vec<(String, tokio::task::JoinHandle<()>)>,
    threads: Vec<(String, std::thread::JoinHandle<()>)>,
    stoppers: Vec<(String, Box<dyn FnOnce() + Send>)>,
}

impl Supervisor {
    /// A supervisor with its own async runtime (two workers).
    pub fn new() -> std::io::Result<Supervisor> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()?;
        Ok(Supervisor {
            runtime: Some(runtime),
            shutdown: Shutdown::new(),
            status: Arc::new(SupervisorStatus::default()),
            tasks: Vec::new(),
            threads: Vec::new(),
            stoppers: Vec::new(),
        })
    }

    /// The runtime the tasks run on (for parts that spawn their own tasks on it; those end
    /// when the runtime shuts down in [`Supervisor::stop`]).
    pub fn handle(&self) -> &tokio::runtime::Handle {
        match &self.runtime {
            Some(runtime) => runtime.handle(),
            None => unreachable!("the runtime lives until stop consumes the supervisor"),
        }
    }

    /// The shutdown signal, for parts that watch it themselves.
    pub fn shutdown(&self) -> &Shutdown {
        &self.shutdown
    }

    /// Shared status (running, started, unexpected exits).
    pub fn status(&self) -> Arc<SupervisorStatus> {
        self.status.clone()
    }

    /// Runs `future` as the task `name` until it ends or shutdown is asked for.
    pub fn spawn_task(
        &mut self,
        name: impl Into<String>,
        future: impl Future<Output = ()> + Send + 'static,
    ) {
        let name = name.into();
        let shutdown = self.shutdown.clone();
        let status = self.status.clone();
        status.begin();
        let label = name.clone();
        let part = self.handle().spawn(future);
        let handle = self.handle().spawn(async move {
            // The part runs as a task of its own so that a panic ends only it, and is seen
            // here (as the join error) to be reported.
            let abort = part.abort_handle();
            let panicked = tokio::select! {
                ended = part => ended.is_err_and(|e| e.is_panic()),
                _ = shutdown.stopped() => {
                    abort.abort();
                    false
                }
            };
            status.end(&label, shutdown.is_set(), panicked);
        });
        self.tasks.push((name, handle));
    }

    /// Runs `body` on the thread `name`; it is handed the shutdown signal and must return
    /// once it is set.
    pub fn spawn_thread(
        &mut self,
        name: impl Into<String>,
        body: impl FnOnce(Shutdown) + Send + 'static,
    ) -> std::io::Result<()> {
        let name = name.into();
        let shutdown = self.shutdown.clone();
        let status = self.status.clone();
        status.begin();
        let label = name.clone();
        let spawned = std::thread::Builder::new()
            .name(name.clone())
            .spawn(move || {
                let run = std::panic::AssertUnwindSafe(|| body(shutdown.clone()));
                let panicked = std::panic::catch_unwind(run).is_err();
                status.end(&label, shutdown.is_set(), panicked);
            });
        match spawned {
            Ok(handle) => {
                self.threads.push((name, handle));
                Ok(())
            }
            Err(e) => {
                self.status.never_began();
                Err(e)
            }
        }
    }

    /// Something that stops (and joins) on its own, such as the UDP workers: run on `stop`.
    pub fn on_stop(&mut self, name: impl Into<String>, stop: impl FnOnce() + Send + 'static) {
        self.stoppers.push((name.into(), Box::new(stop)));
    }

    /// The names of the threads and tasks started, in order.
    pub fn names(&self) -> Vec<String> {
        let tasks = self.tasks.iter().map(|(n, _)| n.clone());
        let threads = self.threads.iter().map(|(n, _)| n.clone());
        let stoppers = self.stoppers.iter().map(|(n, _)| n.clone());
        tasks.chain(threads).chain(stoppers).collect()
    }

    /// Blocks on `future` on the supervisor's runtime.
    pub fn block_on<F: Future>(&self, future: F) -> F::Output {
        self.handle().block_on(future)
    }

    /// Signals shutdown, stops and joins every part, then shuts the runtime down (which ends
    /// the tasks parts spawned for themselves). Returns the status, `running` 0 when all ended.
    pub fn stop(mut self) -> Arc<SupervisorStatus> {
        self.shutdown.set();
        for (name, stop) in self.stoppers.drain(..) {
            tracing::debug!("stopping {name}");
            stop();
        }
        if let Some(runtime) = self.runtime.take() {
            for (name, task) in self.tasks.drain(..) {
                if let Err(e) = runtime.block_on(task) {
                    tracing::error!("task {name}: {e}");
                }
            }
            runtime.shutdown_timeout(Duration::from_secs(2));
        }
        for (name, thread) in self.threads.drain(..) {
            if thread.join().is_err() {
                tracing::error!("thread {name} could not be joined");
            }
        }
        self.status.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_task_that_panics_or_ends_early_is_counted_and_stop_joins_the_rest() {
        let mut supervisor = Supervisor::new().unwrap_or_else(|e| panic!("runtime: {e}"));
        let status = supervisor.status();
        supervisor.spawn_task("panics", async { panic!("on purpose") });
        supervisor.spawn_task("ends", async {});
        supervisor.spawn_task("waits", std::future::pending());
        supervisor
            .spawn_thread(
                "sleeps",
                |shutdown| while !shutdown.sleep(Duration::from_secs(5)) {},
            )
            .unwrap_or_else(|e| panic!("thread: {e}"));
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while status.unexpected_exits() < 2 {
            assert!(std::time::Instant::now() < deadline, "exits not counted");
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(status.running(), 2);
        let stopped = supervisor.stop();
        assert_eq!(stopped.running(), 0);
        assert_eq!(stopped.started(), 4);
        assert_eq!(stopped.unexpected_exits(), 2);
    }
}
