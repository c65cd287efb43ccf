//! The Kubernetes adapter: `gantry run` against a real API server.
//!
//! ```text
//!  watchers (async) --Input--> scheduling thread (owns the Scheduler) --BindRequest--> binder
//!        ^                          |  |       ^                                         |
//!        |                          |  |       +-------------- Input::Bound -------------+
//!        |                          |  +--PreemptRequest--> preemption --Release/Activate-^
//!   kube-apiserver <---- events ---- Record <------------------- (Preempted events)
//! ```
//!
//! - [`watch`]: one watcher per kind; objects become the compact model at the edge.
//! - [`reflector`]: list from the watch cache, then watch; relist when too old.
//! - [`protobuf`]: Kubernetes' protobuf encoding, for the lists and watches of pods and
//!   nodes (`clientConnection.contentType`).
//! - [`driver`]: the scheduling thread; never blocks on the network.
//! - [`binder`]: many bindings in flight over one client.
//! - [`preemption`]: the evictions DefaultPreemption decides, a task per preemption.
//! - [`extender`]: the calls to scheduler extenders, a task per pod they filter or score,
//!   and their bind call.
//! - [`client`]: the API client, over HTTP/2 when the API server offers it.
//! - [`events`]: events and `PodScheduled` conditions, coalesced, off the critical path.
//! - [`leader`]: Lease-based leader election.
//! - [`metrics`], [`instrument`], [`health`]: kube-scheduler's metrics and the health
//!   endpoints; [`exposition`]: the text formats `/metrics` speaks; [`process_metrics`]
//!   and [`rest_client`]: the process's and the API requests' families; [`serving`]: all
//!   of it served over HTTPS with delegated authentication and authorization, as
//!   kube-scheduler serves them.
//! - [`throttle`]: `clientConnection.qps` and `burst`.
//! - [`node_load`]: node load from Prometheus or node annotations, for LoadAware and
//!   Overcommit.
//! - [`pod_group_status`]: the status of PodGroups (gang scheduling), written by the
//!   leader off the scheduling thread.

#![warn(missing_docs)]

pub mod batch_histogram;
pub mod binder;
pub mod client;
pub mod driver;
pub mod events;
pub mod exposition;
pub mod extender;
pub mod hami_lock;
pub mod health;
pub mod instrument;
pub mod leader;
pub mod lenient;
pub mod metrics;
pub mod node_load;
pub mod pod_group_status;
pub mod pre_bind;
pub mod preemption;
pub mod process_metrics;
pub mod profiling;
pub mod protobuf;
pub mod questions;
pub mod readiness;
pub mod reflector;
pub mod rest_client;
pub mod serving;
pub mod signals;
pub mod throttle;
pub mod watch;

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::sync::mpsc::Sender;
use std::time::Duration;

use crate::signals::Signals;
pub use client::connect;
use driver::{Driver, Input};
use gantry_core::cache::Tracked;
use gantry_core::config::Config;
use gantry_core::decision::file::{DecisionLog, LogError, Rotation};
use gantry_core::decision::{DecisionRecorder, DecisionStore};
use gantry_core::scheduler::ExtenderRequest;
use gantry_core::scheduler::Scheduler;
use health::Health;
use instrument::Instrumentation;
use leader::Elector;
use metrics::Metrics;
use node_load::{LoadSource, NodeLoadSettings};
use tokio::sync::mpsc::UnboundedSender;
use tokio::task::JoinHandle;

/// How long a shutdown waits for the event writer to finish.
const EVENTS_GRACE: Duration = Duration::from_secs(5);

/// Why `gantry run` stopped with an error. Each message includes its cause, so none is
/// returned as a `source` as well (the CLI would print it twice).
#[derive(Debug, thiserror::Error)]
pub enum AdapterError {
    /// A scheduler extender cannot be set up (its TLS files).
    #[error(transparent)]
    Extender(#[from] extender::SetupError),
    /// The kubeconfig cannot be read or used.
    #[error("kubeconfig {path}: {error}")]
    Kubeconfig {
        /// The file.
        path: String,
        /// Why.
        error: kube::config::KubeconfigError,
    },
    /// `--master` is not a URL.
    #[error("--master {master:?}: {error}")]
    Master {
        /// The value given.
        master: String,
        /// Why it is not a URL.
        error: String,
    },
    /// No kubeconfig was given and none could be found (nor an in-cluster configuration).
    #[error("no API server configuration: {0}")]
    Infer(kube::config::InferConfigError),
    /// The HTTP client cannot be built.
    #[error("cannot build the API client: {0}")]
    Client(kube::Error),
    /// The metrics and health endpoints cannot be served over plain HTTP (`--address`).
    #[error("--address {address}: cannot serve HTTP: {error}")]
    Serve {
        /// The address.
        address: SocketAddr,
        /// Why.
        error: std::io::Error,
    },
    /// The secure port cannot be served.
    #[error(transparent)]
    SecureServing(#[from] serving::ServingError),
    /// The scheduling thread or the signal handlers cannot be started.
    #[error("cannot start: {0}")]
    Start(std::io::Error),
    /// The lease could not be renewed: another replica may lead now.
    #[error("leader election lost")]
    LeadershipLost,
    /// The decision log file cannot be opened.
    #[error(transparent)]
    DecisionLog(#[from] LogError),
}

impl From<kube::config::InferConfigError> for AdapterError {
    fn from(e: kube::config::InferConfigError) -> Self {
        AdapterError::Infer(e)
    }
}

impl From<kube::Error> for AdapterError {
    fn from(e: kube::Error) -> Self {
        AdapterError::Client(e)
    }
}

impl From<std::io::Error> for AdapterError {
    fn from(e: std::io::Error) -> Self {
        AdapterError::Start(e)
    }
}

/// Where `gantry run` keeps its decision records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecisionSettings {
    /// Records kept in memory (served at `/debug/decisions/<namespace>/<pod>`).
    pub capacity: usize,
    /// The JSON-lines file the records are also appended to, if any.
    pub file: Option<Rotation>,
}

impl Default for DecisionSettings {
    fn default() -> Self {
        DecisionSettings {
            capacity: gantry_core::decision::store::DEFAULT_CAPACITY,
            file: None,
        }
    }
}

/// What `gantry run` needs.
pub struct Options {
    /// The configuration.
    pub config: Config,
    /// A kubeconfig; `clientConnection.kubeconfig`, then the usual places (`KUBECONFIG`,
    /// `~/.kube/config`, in-cluster) when absent.
    pub kubeconfig: Option<PathBuf>,
    /// The API server's address, overriding the kubeconfig's (`--master`).
    pub master: Option<String>,
    /// Where to serve `/metrics`, `/healthz`, `/readyz`, `/livez` and `/debug/decisions`.
    pub serving: serving::Serving,
    /// The filtering and scoring thread pool.
    pub pool: Option<Arc<rayon::ThreadPool>>,
    /// Where node load comes from.
    pub node_load: NodeLoadSettings,
    /// Where decision records go.
    pub decisions: DecisionSettings,
    /// Fresh configurations for the schedulers that answer what-if questions (none: the
    /// questions are not answered).
    pub questions: Option<questions::ConfigSource>,
    /// What those questions may cost.
    pub question_settings: questions::QuestionSettings,
}

/// Runs the scheduler against the API server until SIGTERM or SIGINT (then stops cleanly,
/// releasing the lease) or until leadership is lost (an error: the process must exit).
pub async fn run(options: Options) -> Result<(), AdapterError> {
    let Options {
        mut config,
        kubeconfig,
        master,
        serving,
        pool,
        node_load,
        decisions,
        questions,
        question_settings,
    } = options;
    let decision_log = decisions.file.map(DecisionLog::start).transpose()?;
    let decision_store = DecisionStore::shared(decisions.capacity);
    let metrics = Arc::new(Metrics::new());
    let client = client::connect_to(
        kubeconfig.as_deref(),
        master.as_deref(),
        &config.client_connection,
        Some(metrics.rest_client()),
    )
    .await?;
    let instrumentation = Instrumentation::new(metrics.clone());
    config.profiles = config
        .profiles
        .iter()
        .map(|p| instrumentation.instrument(p))
        .collect();
    let profiles: BTreeSet<String> = config
        .profiles
        .iter()
        .map(|p| p.scheduler_name.clone())
        .collect();
    let identity = leader::identity();
    let ready = Arc::new(AtomicBool::new(false));
    let standing = Arc::new(readiness::Watchers::default());
    let (inputs, inputs_rx) = std::sync::mpsc::channel();
    let health = Health {
        metrics: metrics.clone(),
        ready: ready.clone(),
        watchers: standing.clone(),
        decisions: decision_store.clone(),
        profiling: serving.profiling,
        questions: questions
            .map(|config| questions::Questions::new(inputs.clone(), config, question_settings)),
        debug: true,
    };
    let asked = health.questions.clone();
    let (served, secure_served) = serve(&serving, health).await?;
    tracing::info!(%served, %secure_served, %identity, ?profiles, "gantry starting");

    let mut signals = Signals::new()?;
    let (bind_tx, bind_rx) = tokio::sync::mpsc::unbounded_channel();
    let (recorder, events_task) = events::spawn(client.clone(), identity.clone(), metrics.clone());
    let extender_clients = if config.extenders.is_empty() {
        None
    } else {
        Some(extender::Clients::new(&config.extenders)?)
    };
    let (extender_tx, extender_task) =
        spawn_extenders(extender_clients.as_ref(), &client, &inputs).unzip();
    let binder_task = tokio::spawn(binder::run(
        client.clone(),
        extender_clients,
        bind_rx,
        report_binding(&inputs),
        report_hami_lock(&inputs),
        metrics.clone(),
    ));
    let (preempt_tx, preempt_rx) = tokio::sync::mpsc::unbounded_channel();
    let preemption_task = spawn_preemption(&client, preempt_rx, &recorder, &inputs, &metrics);
    let election = config.leader_election.clone();
    let runner = pool.clone();
    let content_type = config.client_connection.content_type;
    let mut scheduler = Scheduler::new(config, pool);
    scheduler.set_explain(true);
    let tracked = scheduler.cache().tracked();
    tracing::info!(?tracked, "cluster state kept beyond nodes and pods");
    let (leading_tx, leading_rx) = tokio::sync::watch::channel(false);
    let (group_status, group_status_task) = if tracked.contains(Tracked::PodGroups) {
        let (feed, task) = pod_group_status::spawn(client.clone(), content_type, leading_rx);
        (Some(feed), Some(task))
    } else {
        (None, None)
    };
    let watching = watch::Watching {
        client: client.clone(),
        inputs: inputs.clone(),
        watchers: standing,
        metrics: metrics.clone(),
    };
    let (watchers, watched) =
        watch::spawn_all(&watching, profiles, tracked, content_type, group_status);
    let load_task = spawn_node_load(
        &node_load.source,
        tracked.contains(Tracked::NodeLoad),
        &inputs,
    );
    let driver = Driver {
        scheduler,
        inputs: inputs_rx,
        binder: bind_tx,
        preemptions: preempt_tx,
        extenders: extender_tx,
        recorder,
        metrics: metrics.clone(),
        instrumentation,
        watchers: watched.into_iter().collect(),
        ready,
        node_load,
        decisions: DecisionRecorder::new(decision_store, decision_log, false),
    };
    let thread = std::thread::Builder::new()
        .name("scheduler".to_string())
        // Driven from inside the pool, a cycle hands work to the other threads without
        // waking itself up through a latch: two context switches fewer per parallel step.
        .spawn(move || match runner {
            Some(pool) => pool.install(|| driver.run()),
            None => driver.run(),
        })?;

    let mut elector = election
        .enabled
        .then(|| Elector::new(client.clone(), election, identity, metrics.clone()));
    let leading = lead_until_stopped(&mut elector, &mut signals, &inputs, &leading_tx).await?;

    let started = Started {
        inputs,
        asked,
        load_task,
        thread,
        watchers,
        group_status_task,
        extender_task,
        binder_task,
        preemption_task,
        events_task,
    };
    started.stop(elector.as_mut().filter(|_| leading)).await;
    tracing::info!("stopped");
    Ok(())
}

/// What `run` started, stopped in order at shutdown.
struct Started {
    inputs: Sender<Input>,
    asked: Option<questions::Questions>,
    load_task: Option<JoinHandle<()>>,
    thread: std::thread::JoinHandle<()>,
    watchers: Vec<JoinHandle<()>>,
    group_status_task: Option<JoinHandle<()>>,
    extender_task: Option<JoinHandle<()>>,
    binder_task: JoinHandle<()>,
    preemption_task: JoinHandle<()>,
    events_task: JoinHandle<()>,
}

impl Started {
    /// Stops scheduling, lets bindings and evictions under way finish, releases the lease
    /// (`elector`, when this replica led), and gives the events a grace period to drain.
    async fn stop(self, elector: Option<&mut Elector>) {
        tracing::info!("shutting down");
        if let Some(questions) = &self.asked {
            questions.shut_down();
        }
        let _ = self.inputs.send(Input::Shutdown);
        drop(self.inputs);
        if let Some(t) = self.load_task {
            t.abort();
        }
        // The thread returns once bindings in flight are done (or after its grace period).
        let _ = tokio::task::spawn_blocking(move || self.thread.join()).await;
        for w in self.watchers {
            w.abort();
        }
        if let Some(t) = self.group_status_task {
            t.abort();
        }
        // Answers would find no scheduling thread: calls under way are dropped.
        if let Some(t) = self.extender_task {
            t.abort();
        }
        let _ = self.binder_task.await;
        // Evictions under way are finished before a standby may take over and decide again.
        let _ = self.preemption_task.await;
        // Nothing is scheduled or bound any more: a standby may take over while events drain.
        if let Some(e) = elector
            && let Err(err) = e.release().await
        {
            tracing::warn!(error = %err, "cannot release the lease");
        }
        if tokio::time::timeout(EVENTS_GRACE, self.events_task)
            .await
            .is_err()
        {
            tracing::warn!("events still unwritten at shutdown");
        }
    }
}

/// Campaigns for the lease (when leader election is on) until a signal comes, then leads
/// (the scheduling thread schedules, PodGroup statuses are written) until a signal comes;
/// returns whether it led. Losing the lease is an error: the process must exit.
async fn lead_until_stopped(
    elector: &mut Option<Elector>,
    signals: &mut Signals,
    inputs: &Sender<Input>,
    leading: &tokio::sync::watch::Sender<bool>,
) -> Result<bool, AdapterError> {
    if let Some(e) = elector {
        tokio::select! {
            () = e.acquire() => {}
            () = signals.wait() => return Ok(false),
        }
    }
    let _ = inputs.send(Input::Lead);
    let _ = leading.send(true);
    let lost = async {
        match elector {
            Some(e) => e.keep_renewing().await,
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        () = lost => Err(AdapterError::LeadershipLost),
        () = signals.wait() => Ok(true),
    }
}

/// Serves the HTTP endpoints (`/metrics`, health, debug) on the plain and the secure
/// address configured; returns where each is served (empty when it is not).
async fn serve(
    serving: &serving::Serving,
    health: Health,
) -> Result<(String, String), AdapterError> {
    let plain = match serving.plain {
        Some(address) => Some(
            serving::serve_plain(
                address,
                Health {
                    debug: serving.plain_debug,
                    ..health.clone()
                },
            )
            .await
            .map_err(|error| AdapterError::Serve { address, error })?,
        ),
        None => None,
    };
    let secure = match &serving.secure {
        Some(settings) => Some(serving::serve_secure(settings, health).await?),
        None => None,
    };
    let address = |served: Option<&(SocketAddr, _)>| served.map(|(a, _)| a.to_string());
    Ok((
        address(plain.as_ref()).unwrap_or_default(),
        address(secure.as_ref()).unwrap_or_default(),
    ))
}

/// The task calling the extenders (when any is configured), which hands their answers to the
/// scheduling thread, and the channel of its requests.
fn spawn_extenders(
    clients: Option<&extender::Clients>,
    client: &kube::Client,
    inputs: &Sender<Input>,
) -> Option<(UnboundedSender<ExtenderRequest>, JoinHandle<()>)> {
    let clients = clients?;
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let answers = inputs.clone();
    let task = tokio::spawn(extender::run(
        clients.clone(),
        client.clone(),
        rx,
        move |answer| {
            let _ = answers.send(Input::Extenders(Box::new(answer)));
        },
    ));
    Some((tx, task))
}

/// How the binder reports a binding's outcome to the scheduling thread.
fn report_binding(
    inputs: &Sender<Input>,
) -> impl Fn(Box<binder::BindRequest>, binder::BindOutcome) + Clone + Send + 'static {
    let bound = inputs.clone();
    move |request, outcome| {
        // The scheduling thread is gone only when shutting down; the result no longer
        // matters then.
        let _ = bound.send(Input::Bound(request, outcome));
    }
}

/// How the binder reports a HAMi node lock it found held (or taken).
fn report_hami_lock(inputs: &Sender<Input>) -> Arc<pre_bind::LockSeen> {
    let locks = inputs.clone();
    Arc::new(move |node: &str, holder: Option<&str>| {
        let input = Input::HamiLock {
            node: Arc::from(node),
            holder: holder.map(str::to_string),
        };
        let _ = locks.send(input);
    })
}

/// The task carrying out the evictions DefaultPreemption decides, which reports through the
/// same channel as the watchers' events, so that the scheduling thread sees a preemptor's
/// release before the deletion it precedes.
fn spawn_preemption(
    client: &kube::Client,
    requests: tokio::sync::mpsc::UnboundedReceiver<preemption::PreemptRequest>,
    recorder: &events::Recorder,
    inputs: &Sender<Input>,
    metrics: &Arc<Metrics>,
) -> JoinHandle<()> {
    let (release, activate, done) = (inputs.clone(), inputs.clone(), inputs.clone());
    tokio::spawn(preemption::run(
        preemption::PodApi(client.clone()),
        requests,
        recorder.clone(),
        move |pod: &events::PodRef| {
            let _ = release.send(Input::Release {
                namespace: pod.namespace.clone(),
                name: pod.name.clone(),
            });
        },
        move |pod: &events::PodRef| {
            let _ = activate.send(Input::Activate {
                namespace: pod.namespace.clone(),
                name: pod.name.clone(),
            });
        },
        move |pod: &events::PodRef, evicted: bool| {
            let _ = done.send(Input::PreemptionDone {
                namespace: pod.namespace.clone(),
                name: pod.name.clone(),
                evicted,
            });
        },
        metrics.clone(),
    ))
}

/// The task reading node load from Prometheus, when a plugin reads node load and Prometheus
/// is its source (annotations are read with the nodes).
fn spawn_node_load(
    source: &LoadSource,
    reads_load: bool,
    inputs: &Sender<Input>,
) -> Option<JoinHandle<()>> {
    if !reads_load && !matches!(source, LoadSource::None) {
        tracing::warn!("no enabled plugin reads node load: the load source is not used");
    }
    match source {
        _ if !reads_load => None,
        LoadSource::Prometheus(source) => {
            tracing::info!(url = %source.url, interval = ?source.interval, "node load from Prometheus");
            let inputs = inputs.clone();
            Some(node_load::spawn_prometheus(
                source.clone(),
                move |readings| inputs.send(Input::NodeLoads(readings)).is_ok(),
            ))
        }
        LoadSource::Annotations => {
            tracing::info!("node load from node annotations");
            None
        }
        LoadSource::None => None,
    }
}

/// The crate's own tests count memory as the `gantry` binary does (what-if's budgets).
#[cfg(test)]
#[global_allocator]
static ALLOCATOR: gantry_core::memory::CountingAllocator = gantry_core::memory::CountingAllocator;
