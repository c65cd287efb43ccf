//! Prometheus metrics with kube-scheduler's names, labels and buckets, so that dashboards and
//! alerts written for kube-scheduler work for gantry unchanged.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use super::batch_histogram::BatchHistogram;
use super::exposition::{Families, Format, openmetrics_to_text};
use super::process_metrics::ProcessCollector;
use super::rest_client::RestClientMetrics;
use gantry_core::framework::Code;
use gantry_core::queue::QueueName;

/// `result` label value of a pod that was bound.
pub const RESULT_SCHEDULED: &str = "scheduled";
/// `result` label value of a pod that fits no node.
pub const RESULT_UNSCHEDULABLE: &str = "unschedulable";
/// `result` label value of an attempt that failed (plugin error, failed binding).
pub const RESULT_ERROR: &str = "error";

/// Labels `result` and `profile`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabels {
    /// `scheduled`, `unschedulable` or `error`.
    pub result: &'static str,
    /// The profile's scheduler name.
    pub profile: String,
}

/// Label `attempts`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct AttemptsLabels {
    /// Attempts it took to schedule the pod.
    pub attempts: String,
}

/// Label `queue`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct QueueLabels {
    /// `active`, `backoff`, `unschedulable` or `gated`.
    pub queue: &'static str,
}

/// Labels `queue` and `event`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct QueueEventLabels {
    /// The sub-queue the pods entered.
    pub queue: &'static str,
    /// What moved them there.
    pub event: &'static str,
}

/// Labels `extension_point`, `status` and `profile`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ExtensionPointLabels {
    /// `PreFilter`, `Score`, `Bind`, ...
    pub extension_point: &'static str,
    /// The status code (`Success`, `Unschedulable`, `Error`, ...).
    pub status: &'static str,
    /// The profile's scheduler name.
    pub profile: String,
}

/// Labels `plugin`, `extension_point` and `status`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PluginLabels {
    /// The plugin's name.
    pub plugin: &'static str,
    /// The extension point.
    pub extension_point: &'static str,
    /// The status code.
    pub status: &'static str,
}

/// Labels `plugin` and `profile`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, PartialOrd, Ord, EncodeLabelSet)]
pub struct PluginProfileLabels {
    /// The plugin's name.
    pub plugin: &'static str,
    /// The profile's scheduler name.
    pub profile: String,
}

/// Labels `plugin`, `extension_point` and `profile`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct EvaluationLabels {
    /// The plugin's name.
    pub plugin: &'static str,
    /// `PreFilter`, `Filter`, `PreScore` or `Score`.
    pub extension_point: &'static str,
    /// The profile's scheduler name.
    pub profile: String,
}

/// Label `type`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CacheLabels {
    /// `nodes`, `pods` or `assumed_pods`.
    pub r#type: &'static str,
}

/// Label `resource`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResourceLabels {
    /// The watched resource (`pods`, `podgroups`, ...).
    pub resource: &'static str,
}

/// Label `name`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct LeaseLabels {
    /// The lease's name.
    pub name: String,
}

/// `result` label value of a preemption whose API calls all succeeded.
pub const GOROUTINE_SUCCESS: &str = "success";
/// `result` label value of a preemption with an API call that failed.
pub const GOROUTINE_ERROR: &str = "error";

/// Label `result` alone.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutcomeLabels {
    /// [`GOROUTINE_SUCCESS`] or [`GOROUTINE_ERROR`].
    pub result: &'static str,
}

/// Label `operation`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OperationLabels {
    /// What the work is (`binding`).
    pub operation: &'static str,
}

type HistogramFamily<L> = Family<L, Histogram, fn() -> Histogram>;

fn attempt_buckets() -> Histogram {
    Histogram::new(exponential_buckets(0.001, 2.0, 15))
}

fn sli_buckets() -> Histogram {
    Histogram::new(exponential_buckets(0.01, 2.0, 20))
}

fn extension_point_buckets() -> Histogram {
    Histogram::new(exponential_buckets(0.0001, 2.0, 12))
}

fn preemption_goroutine_buckets() -> Histogram {
    Histogram::new(exponential_buckets(0.01, 2.0, 20))
}

fn permit_wait_buckets() -> Histogram {
    Histogram::new(exponential_buckets(0.001, 2.0, 15))
}

fn plugin_buckets() -> BatchHistogram {
    BatchHistogram::new(exponential_buckets(0.00001, 1.5, 20))
}

/// kube-scheduler's name for a status code, as its metrics label it.
pub fn code_label(code: Code) -> &'static str {
    match code {
        Code::Success => "Success",
        Code::Error => "Error",
        Code::Unschedulable => "Unschedulable",
        Code::UnschedulableAndUnresolvable => "UnschedulableAndUnresolvable",
        Code::Wait => "Wait",
        Code::Skip => "Skip",
        Code::Pending => "Pending",
    }
}

/// Every metric gantry serves.
pub struct Metrics {
    registry: Registry,
    schedule_attempts: Family<ResultLabels, Counter>,
    attempt_duration: HistogramFamily<ResultLabels>,
    algorithm_duration: Histogram,
    sli_duration: HistogramFamily<AttemptsLabels>,
    pod_attempts: Histogram,
    pending_pods: Family<QueueLabels, Gauge>,
    incoming_pods: Family<QueueEventLabels, Counter>,
    extension_point_duration: HistogramFamily<ExtensionPointLabels>,
    plugin_duration: Family<PluginLabels, BatchHistogram, fn() -> BatchHistogram>,
    goroutines: Family<OperationLabels, Gauge>,
    preemption_attempts: Counter,
    preemption_victims: Histogram,
    preemption_duration: HistogramFamily<OutcomeLabels>,
    preemption_executions: Family<OutcomeLabels, Counter>,
    permit_wait: HistogramFamily<OutcomeLabels>,
    permit_waiting: Gauge,
    decision_log_dropped: Counter,
    bindings_unconfirmed: Counter,
    unreadable_objects: Family<ResourceLabels, Gauge>,
    records_dropped: Counter,
    cache_size: Family<CacheLabels, Gauge>,
    unschedulable: Family<PluginProfileLabels, Gauge>,
    /// The `unschedulable` series set so far, set to 0 when no pod names them any more.
    unschedulable_series: Mutex<BTreeSet<PluginProfileLabels>>,
    evaluations: Family<EvaluationLabels, Counter>,
    leader: Family<LeaseLabels, Gauge>,
    rest_client: RestClientMetrics,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// The metrics, registered and at zero.
    #[allow(
        clippy::too_many_lines,
        reason = "a table: each family, its name and its help, in kube-scheduler's order"
    )]
    pub fn new() -> Self {
        let mut registry = Registry::default();
        let mut families = Families::default();
        let schedule_attempts = Family::<ResultLabels, Counter>::default();
        families.add(
            "scheduler_schedule_attempts",
            "[STABLE] Number of attempts to schedule pods, by the result. 'unschedulable' means a pod could not be scheduled, while 'error' means an internal scheduler problem.",
            schedule_attempts.clone(),
        );
        let attempt_duration: HistogramFamily<ResultLabels> =
            Family::new_with_constructor(attempt_buckets);
        families.add(
            "scheduler_scheduling_attempt_duration_seconds",
            "[STABLE] Scheduling attempt latency in seconds (scheduling algorithm + binding)",
            attempt_duration.clone(),
        );
        let algorithm_duration = attempt_buckets();
        families.add(
            "scheduler_scheduling_algorithm_duration_seconds",
            "[BETA] Scheduling algorithm latency in seconds",
            algorithm_duration.clone(),
        );
        let sli_duration: HistogramFamily<AttemptsLabels> =
            Family::new_with_constructor(sli_buckets);
        families.add(
            "scheduler_pod_scheduling_sli_duration_seconds",
            "[BETA] E2e latency for a pod being scheduled, from the time the pod enters the scheduling queue and might involve multiple scheduling attempts.",
            sli_duration.clone(),
        );
        let pod_attempts = Histogram::new(exponential_buckets(1.0, 2.0, 5));
        families.add(
            "scheduler_pod_scheduling_attempts",
            "[STABLE] Number of attempts to successfully schedule a pod.",
            pod_attempts.clone(),
        );
        let pending_pods = Family::<QueueLabels, Gauge>::default();
        families.add(
            "scheduler_pending_pods",
            "[STABLE] Number of pending pods, by the queue type. 'active' means number of pods in activeQ; 'backoff' means number of pods in backoffQ; 'unschedulable' means number of pods in unschedulablePods that the scheduler attempted to schedule and failed; 'gated' is the number of unschedulable pods that the scheduler never attempted to schedule because they are gated.",
            pending_pods.clone(),
        );
        let incoming_pods = Family::<QueueEventLabels, Counter>::default();
        families.add(
            "scheduler_queue_incoming_pods",
            "[STABLE] Number of pods added to scheduling queues by event and queue type.",
            incoming_pods.clone(),
        );
        let extension_point_duration: HistogramFamily<ExtensionPointLabels> =
            Family::new_with_constructor(extension_point_buckets);
        families.add(
            "scheduler_framework_extension_point_duration_seconds",
            "[STABLE] Latency for running all plugins of a specific extension point.",
            extension_point_duration.clone(),
        );
        let plugin_duration: Family<PluginLabels, BatchHistogram, fn() -> BatchHistogram> =
            Family::new_with_constructor(plugin_buckets);
        families.add(
            "scheduler_plugin_execution_duration_seconds",
            "[BETA] Duration for running a plugin at a specific extension point.",
            plugin_duration.clone(),
        );
        let goroutines = Family::<OperationLabels, Gauge>::default();
        families.add(
            "scheduler_goroutines",
            "[BETA] Number of running goroutines split by the work they do such as binding.",
            goroutines.clone(),
        );
        let preemption_attempts = Counter::default();
        families.add(
            "scheduler_preemption_attempts",
            "[STABLE] Total preemption attempts in the cluster till now",
            preemption_attempts.clone(),
        );
        let permit_wait: HistogramFamily<OutcomeLabels> =
            Family::new_with_constructor(permit_wait_buckets);
        families.add(
            "scheduler_permit_wait_duration_seconds",
            "[BETA] Duration of waiting on permit.",
            permit_wait.clone(),
        );
        let permit_waiting = Gauge::default();
        families.add(
            "gantry_permit_waiting_pods",
            "Pods a Permit plugin holds on their node, their room reserved, until it allows or rejects them.",
            permit_waiting.clone(),
        );
        // kube-scheduler's: more than 64 victims is rare, [64, +Inf) is one bucket.
        let preemption_victims = Histogram::new(exponential_buckets(1.0, 2.0, 7));
        families.add(
            "scheduler_preemption_victims",
            "[STABLE] Number of selected preemption victims for preemption initiated by a single pod",
            preemption_victims.clone(),
        );
        let preemption_duration: HistogramFamily<OutcomeLabels> =
            Family::new_with_constructor(preemption_goroutine_buckets);
        families.add(
            "scheduler_preemption_goroutines_duration_seconds",
            "[ALPHA] Duration in seconds for running goroutines for the preemption.",
            preemption_duration.clone(),
        );
        let preemption_executions = Family::<OutcomeLabels, Counter>::default();
        families.add(
            "scheduler_preemption_goroutines_execution",
            "[ALPHA] Number of preemption goroutines executed.",
            preemption_executions.clone(),
        );
        let decision_log_dropped = Counter::default();
        families.add(
            "gantry_decision_log_dropped_records",
            "Decision records left out of the decision log file because its writer fell behind (they stay in memory).",
            decision_log_dropped.clone(),
        );
        let unreadable_objects = Family::<ResourceLabels, Gauge>::default();
        families.add(
            "gantry_unreadable_objects",
            "Watched objects gantry cannot read (a field out of range or of the wrong type), each given its kind's safe reading (a PodGroup is absent), by resource.",
            unreadable_objects.clone(),
        );
        let bindings_unconfirmed = Counter::default();
        families.add(
            "gantry_bindings_unconfirmed",
            "Bindings the API server gave no definite answer to (a broken connection, a timeout, a 5xx, a conflict), whose pods were read back to learn the outcome.",
            bindings_unconfirmed.clone(),
        );
        let records_dropped = Counter::default();
        families.add(
            "gantry_event_records_dropped",
            "Events and PodScheduled conditions given up unwritten: retried for too long, or more pods waiting than the writer keeps.",
            records_dropped.clone(),
        );
        let cache_size = Family::<CacheLabels, Gauge>::default();
        families.add(
            "scheduler_cache_size",
            "[ALPHA] Number of nodes, pods, and assumed (bound) pods in the scheduler cache.",
            cache_size.clone(),
        );
        let unschedulable = Family::<PluginProfileLabels, Gauge>::default();
        families.add(
            "scheduler_unschedulable_pods",
            "[BETA] The number of unschedulable pods broken down by plugin name. A pod will increment the gauge for all plugins that caused it to not schedule and so this metric have meaning only when broken down by plugin.",
            unschedulable.clone(),
        );
        let evaluations = Family::<EvaluationLabels, Counter>::default();
        families.add(
            "scheduler_plugin_evaluation",
            "[BETA] Number of attempts to schedule pods by each plugin and the extension point (available only in PreFilter, Filter, PreScore, and Score).",
            evaluations.clone(),
        );
        let leader = Family::<LeaseLabels, Gauge>::default();
        families.add(
            "leader_election_master_status",
            "[ALPHA] Gauge of if the reporting system is master of the relevant lease, 0 indicates backup, 1 indicates master. 'name' is the string used to identify the lease. Please make sure to group by name.",
            leader.clone(),
        );
        let rest_client = RestClientMetrics::register(&mut families);
        registry.register_collector(Box::new(families));
        registry.register_collector(Box::new(ProcessCollector));
        let metrics = Metrics {
            registry,
            schedule_attempts,
            attempt_duration,
            algorithm_duration,
            sli_duration,
            pod_attempts,
            pending_pods,
            incoming_pods,
            extension_point_duration,
            plugin_duration,
            goroutines,
            preemption_attempts,
            preemption_victims,
            preemption_duration,
            preemption_executions,
            permit_wait,
            permit_waiting,
            decision_log_dropped,
            bindings_unconfirmed,
            unreadable_objects,
            records_dropped,
            cache_size,
            unschedulable,
            unschedulable_series: Mutex::new(BTreeSet::new()),
            evaluations,
            leader,
            rest_client,
        };
        // Series that exist from the start, so that a scrape sees them before any pod.
        metrics.set_pending(0, 0, 0, 0);
        metrics.set_bindings_in_flight(0);
        metrics.set_cache_size(0, 0, 0);
        metrics
    }

    /// The gauge of `resource`'s objects that cannot be read, which its watcher keeps.
    pub fn unreadable_objects(&self, resource: &'static str) -> Gauge {
        self.unreadable_objects
            .get_or_create(&ResourceLabels { resource })
            .clone()
    }

    /// The API request families, for the client's [`RestClientMetrics::layer`].
    pub fn rest_client(&self) -> &RestClientMetrics {
        &self.rest_client
    }

    /// The scheduling algorithm (filter, score, and the reserve and permit of the chosen
    /// node) found a node for a pod in `duration`.
    pub fn algorithm(&self, duration: Duration) {
        self.algorithm_duration.observe(duration.as_secs_f64());
    }

    /// What the cache holds: nodes, placed pods, and of those the ones assumed and not yet
    /// confirmed bound.
    pub fn set_cache_size(&self, nodes: usize, pods: usize, assumed: usize) {
        for (kind, n) in [("nodes", nodes), ("pods", pods), ("assumed_pods", assumed)] {
            self.cache_size
                .get_or_create(&CacheLabels { r#type: kind })
                .set(i64::try_from(n).unwrap_or(i64::MAX));
        }
    }

    /// Waiting pods by (plugin, profile) that rejected (or gates) them; series no pod names
    /// any more go to 0.
    pub fn set_unschedulable(&self, counts: &BTreeMap<PluginProfileLabels, usize>) {
        let mut seen = self
            .unschedulable_series
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        for labels in seen.iter() {
            if !counts.contains_key(labels) {
                self.unschedulable.get_or_create(labels).set(0);
            }
        }
        for (labels, n) in counts {
            self.unschedulable
                .get_or_create(labels)
                .set(i64::try_from(*n).unwrap_or(i64::MAX));
            seen.insert(labels.clone());
        }
    }

    /// The counter of a plugin's runs at `point` (`PreFilter`, `Filter`, `PreScore` or
    /// `Score`) in `profile`, to count into directly.
    pub fn evaluations(&self, plugin: &'static str, point: &'static str, profile: &str) -> Counter {
        self.evaluations
            .get_or_create(&EvaluationLabels {
                plugin,
                extension_point: point,
                profile: profile.to_string(),
            })
            .clone()
    }

    /// This replica leads (or stands by for) the lease `name`.
    pub fn set_leader(&self, name: &str, leading: bool) {
        self.leader
            .get_or_create(&LeaseLabels {
                name: name.to_string(),
            })
            .set(i64::from(leading));
    }

    /// An attempt that ended with `result` after `duration`.
    pub fn attempt(&self, result: &'static str, profile: &str, duration: Duration) {
        let labels = ResultLabels {
            result,
            profile: profile.to_string(),
        };
        self.schedule_attempts.get_or_create(&labels).inc();
        self.attempt_duration
            .get_or_create(&labels)
            .observe(duration.as_secs_f64());
    }

    /// A pod bound: the attempt (scheduling and binding), and the pod's whole time in the
    /// queue over `attempts` attempts.
    pub fn scheduled(
        &self,
        profile: &str,
        attempt: Duration,
        since_queued: Duration,
        attempts: u32,
    ) {
        self.attempt(RESULT_SCHEDULED, profile, attempt);
        self.sli_duration
            .get_or_create(&AttemptsLabels {
                attempts: attempts.to_string(),
            })
            .observe(since_queued.as_secs_f64());
        self.pod_attempts.observe(f64::from(attempts));
    }

    /// The sizes of the sub-queues.
    pub fn set_pending(&self, active: usize, backoff: usize, unschedulable: usize, gated: usize) {
        for (queue, n) in [
            ("active", active),
            ("backoff", backoff),
            ("unschedulable", unschedulable),
            ("gated", gated),
        ] {
            self.pending_pods
                .get_or_create(&QueueLabels { queue })
                .set(i64::try_from(n).unwrap_or(i64::MAX));
        }
    }

    /// `n` pods entered `queue` because of `event`.
    pub fn incoming(&self, queue: QueueName, event: &'static str, n: u64) {
        self.incoming_pods
            .get_or_create(&QueueEventLabels {
                queue: queue.metric_label(),
                event,
            })
            .inc_by(n);
    }

    /// All plugins of `point` ran for `duration` and ended with `code`.
    pub fn extension_point(&self, point: &'static str, code: Code, profile: &str, d: Duration) {
        self.extension_point_duration
            .get_or_create(&ExtensionPointLabels {
                extension_point: point,
                status: code_label(code),
                profile: profile.to_string(),
            })
            .observe(d.as_secs_f64());
    }

    /// One plugin ran at `point` for `duration` and returned `code`.
    pub fn plugin(&self, plugin: &'static str, point: &'static str, code: Code, d: Duration) {
        self.plugin_calls(plugin, point, code, d, 1);
    }

    /// `calls` calls of a plugin at `point` that returned `code` and took `d` each.
    pub fn plugin_calls(
        &self,
        plugin: &'static str,
        point: &'static str,
        code: Code,
        d: Duration,
        calls: u64,
    ) {
        self.plugin_duration
            .get_or_create(&PluginLabels {
                plugin,
                extension_point: point,
                status: code_label(code),
            })
            .observe_many(d.as_secs_f64(), calls);
    }

    /// The series of one plugin at `point` returning `code`, to observe into directly: for
    /// calls timed by the thousand, a lookup saved each.
    pub fn plugin_series(
        &self,
        plugin: &'static str,
        point: &'static str,
        code: Code,
    ) -> BatchHistogram {
        self.plugin_duration
            .get_or_create(&PluginLabels {
                plugin,
                extension_point: point,
                status: code_label(code),
            })
            .clone()
    }

    /// Bindings currently in flight (kube-scheduler's binding goroutines).
    pub fn set_bindings_in_flight(&self, n: usize) {
        self.goroutines
            .get_or_create(&OperationLabels {
                operation: "binding",
            })
            .set(i64::try_from(n).unwrap_or(i64::MAX));
    }

    /// DefaultPreemption's PostFilter ran (whatever it found).
    pub fn preemption_attempt(&self) {
        self.preemption_attempts.inc();
    }

    /// A preemption chose `n` victims.
    pub fn preemption_victims(&self, n: usize) {
        self.preemption_victims.observe(n as f64);
    }

    /// The API calls of one preemption (kube-scheduler's preemption goroutine) ended with
    /// `result` ([`GOROUTINE_SUCCESS`] or [`GOROUTINE_ERROR`]) after `d`.
    pub fn preemption_carried_out(&self, result: &'static str, d: Duration) {
        let labels = OutcomeLabels { result };
        self.preemption_duration
            .get_or_create(&labels)
            .observe(d.as_secs_f64());
        self.preemption_executions.get_or_create(&labels).inc();
    }

    /// A pod held at Permit was allowed (`Success`) or rejected (`Unschedulable`) after
    /// waiting `d`.
    pub fn permit_waited(&self, result: &'static str, d: Duration) {
        self.permit_wait
            .get_or_create(&OutcomeLabels { result })
            .observe(d.as_secs_f64());
    }

    /// Pods held at Permit now.
    pub fn set_permit_waiting(&self, n: usize) {
        self.permit_waiting
            .set(i64::try_from(n).unwrap_or(i64::MAX));
    }

    /// A decision record did not reach the decision log file.
    pub fn decision_log_dropped(&self) {
        self.decision_log_dropped.inc();
    }

    /// A binding got no definite answer; its pod is read back.
    pub fn binding_unconfirmed(&self) {
        self.bindings_unconfirmed.inc();
    }

    /// `n` events or conditions were given up unwritten.
    pub fn records_dropped(&self, n: u64) {
        self.records_dropped.inc_by(n);
    }

    /// The metrics for a scraper whose `Accept` header is `accept` (see
    /// [`Format::negotiate`]): the content type of the answer, and the answer.
    pub fn render(&self, accept: Option<&str>) -> (&'static str, String) {
        let format = Format::negotiate(accept);
        let body = match format {
            Format::OpenMetrics => self.openmetrics(),
            Format::Text => self.text(),
        };
        (format.content_type(), body)
    }

    /// The metrics in the Prometheus text format 0.0.4.
    pub fn text(&self) -> String {
        openmetrics_to_text(&self.openmetrics())
    }

    fn openmetrics(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kube_scheduler_names_and_labels() {
        let m = Metrics::new();
        m.attempt(RESULT_UNSCHEDULABLE, "gantry", Duration::from_millis(3));
        m.scheduled(
            "gantry",
            Duration::from_millis(5),
            Duration::from_secs(2),
            2,
        );
        m.incoming(QueueName::Active, "UnschedulablePodAdd", 3);
        m.extension_point(
            "PreFilter",
            Code::Success,
            "gantry",
            Duration::from_micros(50),
        );
        m.plugin(
            "NodeResourcesFit",
            "Filter",
            Code::Unschedulable,
            Duration::from_micros(2),
        );
        m.set_pending(1, 2, 3, 4);
        m.plugin_series("NodeResourcesFit", "Filter", Code::Unschedulable)
            .observe_many(0.001, 1);
        m.decision_log_dropped();
        m.binding_unconfirmed();
        m.preemption_attempt();
        m.preemption_attempt();
        m.preemption_victims(3);
        m.preemption_carried_out(GOROUTINE_ERROR, Duration::from_millis(30));
        m.records_dropped(2);
        let text = m.text();
        for line in [
            "scheduler_schedule_attempts_total{result=\"unschedulable\",profile=\"gantry\"} 1",
            "scheduler_schedule_attempts_total{result=\"scheduled\",profile=\"gantry\"} 1",
            "scheduler_scheduling_attempt_duration_seconds_bucket{result=\"unschedulable\",profile=\"gantry\",le=\"0.004\"} 1",
            "scheduler_pod_scheduling_sli_duration_seconds_count{attempts=\"2\"} 1",
            "scheduler_pending_pods{queue=\"gated\"} 4",
            "scheduler_queue_incoming_pods_total{queue=\"active\",event=\"UnschedulablePodAdd\"} 3",
            "scheduler_framework_extension_point_duration_seconds_count{extension_point=\"PreFilter\",status=\"Success\",profile=\"gantry\"} 1",
            "scheduler_plugin_execution_duration_seconds_count{plugin=\"NodeResourcesFit\",extension_point=\"Filter\",status=\"Unschedulable\"} 2",
            "scheduler_goroutines{operation=\"binding\"} 0",
            "scheduler_preemption_attempts_total 2",
            "scheduler_preemption_victims_bucket{le=\"2\"} 0",
            "scheduler_preemption_victims_bucket{le=\"4\"} 1",
            "scheduler_preemption_victims_bucket{le=\"64\"} 1",
            "scheduler_preemption_victims_sum 3",
            "scheduler_preemption_goroutines_duration_seconds_bucket{result=\"error\",le=\"0.04\"} 1",
            "scheduler_preemption_goroutines_duration_seconds_bucket{result=\"error\",le=\"0.02\"} 0",
            "scheduler_preemption_goroutines_execution_total{result=\"error\"} 1",
            "gantry_bindings_unconfirmed_total 1",
            "gantry_event_records_dropped_total 2",
            "gantry_decision_log_dropped_records_total 1",
        ] {
            assert!(text.contains(line), "missing {line:?} in\n{text}");
        }
    }
}
