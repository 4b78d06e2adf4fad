//! Hot reload of a configuration file (feature `reload`): a `notify` watcher on the file's
//! folder, a debounce, then the same all-or-nothing load as `Properties::load_file`.

use std::ffi::OsString;
use std::fmt;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::thread::{self, JoinHandle, ThreadId};
use std::time::{Duration, Instant};

use notify::event::{AccessKind, AccessMode, EventKind};
use notify::{Event, RecommendedWatcher, RecursiveMode, Watcher};
use parking_lot::Mutex;

use crate::config::file::caught;
use crate::config::store::WeakProperties;
use crate::config::{FileFormat, LoadError, LoadReport, Properties};

/// The quiet time a watcher waits for after a change before it reloads, by default.
pub const DEFAULT_DEBOUNCE: Duration = Duration::from_millis(200);

/// A reload callback.
type OnReload = Arc<dyn Fn(&ReloadEvent) + Send + Sync>;

/// How [`Properties::watch_file_with`] watches a file.
#[derive(Clone)]
pub struct WatchOptions {
    debounce: Duration,
    format: Option<FileFormat>,
    on_reload: Option<OnReload>,
}

impl fmt::Debug for WatchOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WatchOptions")
            .field("debounce", &self.debounce)
            .field("format", &self.format)
            .field("on_reload", &self.on_reload.is_some())
            .finish()
    }
}

impl Default for WatchOptions {
    fn default() -> Self {
        WatchOptions::new()
    }
}

impl WatchOptions {
    /// A debounce of [`DEFAULT_DEBOUNCE`] (200 ms), the format by extension, no callback.
    pub fn new() -> Self {
        WatchOptions {
            debounce: DEFAULT_DEBOUNCE,
            format: None,
            on_reload: None,
        }
    }

    /// How long the file must stay unchanged after a change before it is reloaded: an editor
    /// or a deployment tool writing in several steps causes one reload. Default 200 ms.
    pub fn debounce(mut self, debounce: Duration) -> Self {
        self.debounce = debounce;
        self
    }

    /// The file's format, whatever its extension (default: by extension).
    pub fn format(mut self, format: FileFormat) -> Self {
        self.format = Some(format);
        self
    }

    /// Called after every reload, applied or refused (not for the first load, whose outcome
    /// `watch_file` returns), on the watcher's thread or the caller of
    /// [`FileWatcher::reload_now`]. A panic in it is caught and logged.
    pub fn on_reload(mut self, callback: impl Fn(&ReloadEvent) + Send + Sync + 'static) -> Self {
        self.on_reload = Some(Arc::new(callback));
        self
    }
}

/// What started a reload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ReloadTrigger {
    /// The watcher saw the file (or its folder's `..data` link, as in a Kubernetes ConfigMap
    /// volume) change.
    FileChanged,
    /// [`FileWatcher::reload_now`].
    Manual,
}

/// The outcome of one reload, handed to the [`on_reload`](WatchOptions::on_reload) callback.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ReloadEvent {
    /// The file, as an absolute path.
    pub path: PathBuf,
    /// What started the reload.
    pub trigger: ReloadTrigger,
    /// The load's report, or why nothing changed (the last good values stay).
    pub outcome: Result<LoadReport, LoadError>,
}

/// What the watcher's thread and its handle share.
struct Shared {
    properties: WeakProperties,
    path: PathBuf,
    format: FileFormat,
    on_reload: Option<OnReload>,
    /// Serialises reloads, so events reach the callback in the order the loads happened.
    reloading: Mutex<()>,
}

impl Shared {
    /// Reloads the file. Every failure is an outcome, never the end of the watcher: an
    /// unreadable or invalid file is an error, and so is a panic while loading (caught; the
    /// store puts back what a change it was staging had replaced).
    fn reload(&self, trigger: ReloadTrigger) -> Result<LoadReport, LoadError> {
        let _one_at_a_time = self.reloading.lock();
        let outcome = match self.properties.upgrade() {
            Some(properties) => caught(&self.path, "loading it", || {
                properties.load_file_as(&self.path, self.format)
            }),
            None => Err(LoadError::Read {
                path: self.path.clone(),
                reason: "the registry these properties belonged to is gone".into(),
            }),
        };
        match &outcome {
            Ok(report) => tracing::info!(
                "hystrix: reloaded {} ({} changed)",
                self.path.display(),
                report.changed.len()
            ),
            Err(error) => tracing::error!(
                "hystrix: reload of {} refused, the last good configuration stays: {error}",
                self.path.display()
            ),
        }
        let event = ReloadEvent {
            path: self.path.clone(),
            trigger,
            outcome,
        };
        if let Some(callback) = &self.on_reload {
            let call = AssertUnwindSafe(|| callback(&event));
            if catch_unwind(call).is_err() {
                tracing::error!("hystrix: the on_reload callback panicked");
            }
        }
        event.outcome
    }
}

/// Watches a configuration file and reloads it when it changes; from
/// [`Properties::watch_file`]. Dropping it stops the watcher (and waits for a reload in
/// progress to finish).
pub struct FileWatcher {
    shared: Arc<Shared>,
    // Dropped first: that ends the event channel, so the worker stops.
    watcher: Option<RecommendedWatcher>,
    worker: Option<JoinHandle<()>>,
    worker_id: ThreadId,
}

impl fmt::Debug for FileWatcher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FileWatcher")
            .field("path", &self.shared.path)
            .field("format", &self.shared.format)
            .finish_non_exhaustive()
    }
}

impl FileWatcher {
    /// The watched file, as an absolute path.
    pub fn path(&self) -> &Path {
        &self.shared.path
    }

    /// Reloads the file now, as a change would, without waiting for the watcher: the outcome
    /// is returned and also handed to the `on_reload` callback.
    ///
    /// # Errors
    /// As [`Properties::load_file`]; on error nothing changes.
    pub fn reload_now(&self) -> Result<LoadReport, LoadError> {
        self.shared.reload(ReloadTrigger::Manual)
    }
}

impl Drop for FileWatcher {
    fn drop(&mut self) {
        drop(self.watcher.take());
        if let Some(worker) = self.worker.take() {
            // Dropped from its own callback: the worker ends when the callback returns.
            if thread::current().id() != self.worker_id {
                let _ = worker.join();
            }
        }
    }
}

impl Properties {
    /// Loads a configuration file (as [`load_file`](Properties::load_file)) and reloads it
    /// whenever it changes, until the returned [`FileWatcher`] drops. Uses the default
    /// [`WatchOptions`]: a 200 ms debounce, the format by extension, no callback.
    ///
    /// ```no_run
    /// let registry = hystrix::Registry::new();
    /// let watcher = registry.properties().watch_file("/etc/my-service/hystrix.properties")?;
    /// // ... the service runs; edits of the file apply to the next executions ...
    /// drop(watcher); // stops watching
    /// # Ok::<(), hystrix::config::LoadError>(())
    /// ```
    ///
    /// # Errors
    /// As [`load_file`](Properties::load_file) for the first load (no watcher starts), and
    /// [`LoadError::Read`] if the folder cannot be watched.
    pub fn watch_file(&self, path: impl AsRef<Path>) -> Result<FileWatcher, LoadError> {
        self.watch_file_with(path, WatchOptions::new())
    }

    /// [`watch_file`](Properties::watch_file) with options: the debounce, the format, and a
    /// callback that hears every reload's outcome.
    ///
    /// Each reload parses and checks the whole file, then swaps its values in at once; an
    /// invalid file changes nothing (the last good values stay) and the error, naming the file,
    /// line and property, is logged with `tracing::error!` and handed to the callback. A reload
    /// replaces only the values that came from this file: run-time and environment values stay.
    ///
    /// It watches the file's folder, so edits in place, editors' rename-over saves and
    /// Kubernetes ConfigMap `..data` swaps are all seen; a deleted file keeps the last values
    /// (an error event says it cannot be read). Not seen: edits of a symlink's target in
    /// another folder (watch the target itself), and a folder deleted and re-created (the watch
    /// ends; start a new one).
    ///
    /// # Errors
    /// As [`watch_file`](Properties::watch_file).
    pub fn watch_file_with(
        &self,
        path: impl AsRef<Path>,
        options: WatchOptions,
    ) -> Result<FileWatcher, LoadError> {
        let path = std::path::absolute(path.as_ref()).map_err(|err| LoadError::Read {
            path: path.as_ref().to_owned(),
            reason: err.to_string(),
        })?;
        let format = match options.format {
            Some(format) => format,
            None => FileFormat::from_path(&path)
                .ok_or_else(|| LoadError::UnknownFormat { path: path.clone() })?,
        };
        let watch_error = |reason: String| LoadError::Read {
            path: path.clone(),
            reason,
        };
        let (folder, name) = match (path.parent(), path.file_name()) {
            (Some(folder), Some(name)) => (folder.to_owned(), name.to_owned()),
            _ => return Err(watch_error("not a file path".into())),
        };
        // Watch before the first load, so a change made right after it is not missed.
        let (events, received) = mpsc::channel();
        let mut watcher = notify::recommended_watcher(events)
            .map_err(|err| watch_error(format!("cannot watch for changes: {err}")))?;
        watcher
            .watch(&folder, RecursiveMode::NonRecursive)
            .map_err(|err| watch_error(format!("cannot watch {}: {err}", folder.display())))?;
        self.load_file_as(&path, format)?;
        let shared = Arc::new(Shared {
            properties: self.downgrade(),
            path: path.clone(),
            format,
            on_reload: options.on_reload,
            reloading: Mutex::new(()),
        });
        let worker_shared = Arc::clone(&shared);
        let debounce = options.debounce;
        let worker = thread::Builder::new()
            .name("hystrix-config-watch".into())
            .spawn(move || watch_loop(&worker_shared, &received, &name, debounce))
            .map_err(|err| watch_error(format!("cannot start the watcher thread: {err}")))?;
        Ok(FileWatcher {
            shared,
            worker_id: worker.thread().id(),
            watcher: Some(watcher),
            worker: Some(worker),
        })
    }
}

/// Waits for a change of the file, then for `debounce` without one, then reloads; until the
/// watcher is dropped (the channel closes).
fn watch_loop(
    shared: &Shared,
    events: &Receiver<notify::Result<Event>>,
    name: &OsString,
    debounce: Duration,
) {
    loop {
        match events.recv() {
            Ok(event) if concerns(&event, name) => {}
            Ok(_) => continue,
            Err(_) => return,
        }
        let mut quiet_from = Instant::now();
        loop {
            let left = (quiet_from + debounce).saturating_duration_since(Instant::now());
            match events.recv_timeout(left) {
                Ok(event) if concerns(&event, name) => quiet_from = Instant::now(),
                Ok(_) => {}
                Err(RecvTimeoutError::Timeout) => break,
                Err(RecvTimeoutError::Disconnected) => return,
            }
        }
        let _ = shared.reload(ReloadTrigger::FileChanged);
    }
}

/// Whether a folder event may have changed the file: an event on the file itself, or on a
/// `..`-named entry (Kubernetes swaps a ConfigMap volume's `..data` link). Reads (ours
/// included) are not changes.
fn concerns(event: &notify::Result<Event>, name: &OsString) -> bool {
    let event = match event {
        Ok(event) => event,
        Err(err) => {
            tracing::warn!("hystrix: file watcher error: {err}");
            return false;
        }
    };
    if matches!(event.kind, EventKind::Access(kind) if kind != AccessKind::Close(AccessMode::Write))
    {
        return false;
    }
    event.paths.iter().any(|path| {
        path.file_name().is_some_and(|file| {
            file == name.as_os_str() || file.to_string_lossy().starts_with("..")
        })
    })
}
