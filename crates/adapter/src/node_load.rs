//! Node load for `gantry run`: where the samples LoadAware and Overcommit read come from.
//!
//! Two sources, each on its own schedule and never inside a scheduling cycle:
//!
//! - **Prometheus**: a task queries the HTTP API (`/api/v1/query`) every `interval` with one
//!   PromQL expression per resource, each giving a utilisation fraction per node, keyed by a
//!   label (`instance` by default, a `:port` suffix dropped). The defaults read node-exporter's
//!   `node_cpu_seconds_total` and `node_memory_*` metrics. A node's sample carries the
//!   evaluation time Prometheus reports. Readings are reported to the scheduling thread (as
//!   its `NodeLoads` input); a failed query is logged and reports nothing, so the samples age and
//!   the plugins treat them as their configuration says: scheduling never waits for it.
//! - **Annotations** written by an external agent: `gantry.io/cpu-utilization` and
//!   `gantry.io/memory-utilization` (fractions) with `gantry.io/metrics-timestamp` (RFC 3339),
//!   read whenever the node watcher reports the node.
//!
//! Either way the scheduling thread turns a reading into a [`LoadSample`] on its own clock
//! ([`NodeLoadSettings::sample`]): the wall-clock time of the measurement becomes a time on
//! the driver's clock, samples older than `max_age` are stale, and pods placed less than `lag`
//! before the measurement still count as not reflected in it.

use std::collections::HashMap;
use std::time::{Duration, SystemTime};

use http_body_util::{BodyExt, Empty};
use hyper::body::Bytes;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde::Deserialize;

use gantry_core::model::NodeModel;
use gantry_core::model::load::{LoadSample, load_from_annotations};

/// Label that names a node in the default queries.
pub const DEFAULT_NODE_LABEL: &str = "instance";
/// How often Prometheus is queried by default.
pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(15);
/// Default age beyond which a sample is stale (Koordinator's default expiry).
pub const DEFAULT_MAX_AGE: Duration = Duration::from_secs(180);
/// Default time a placement takes to show in measurements (the default queries' rate window).
pub const DEFAULT_LAG: Duration = Duration::from_secs(60);
/// Longest a query may take.
const QUERY_TIMEOUT: Duration = Duration::from_secs(10);

/// The default cpu query: one minus the idle share of every cpu, averaged per node.
pub fn default_cpu_query(node_label: &str) -> String {
    format!("1 - avg by ({node_label}) (rate(node_cpu_seconds_total{{mode=\"idle\"}}[1m]))")
}

/// The default memory query: one minus the available share of memory, per node.
pub fn default_memory_query(node_label: &str) -> String {
    format!(
        "1 - avg by ({node_label}) (node_memory_MemAvailable_bytes / node_memory_MemTotal_bytes)"
    )
}

/// Where node load comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LoadSource {
    /// No node load: LoadAware and Overcommit see no samples.
    None,
    /// Prometheus' HTTP API.
    Prometheus(PrometheusSource),
    /// Node annotations.
    Annotations,
}

/// The Prometheus source's settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PrometheusSource {
    /// Base URL of the server (`http://prometheus:9090`); only plain HTTP.
    pub url: String,
    /// PromQL giving each node's cpu utilisation, a fraction.
    pub cpu_query: String,
    /// PromQL giving each node's memory utilisation, a fraction.
    pub memory_query: String,
    /// The label of the results that holds the node's name.
    pub node_label: String,
    /// Time between queries.
    pub interval: Duration,
}

/// Why the node load settings cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NodeLoadError {
    /// The Prometheus URL is not a plain-HTTP URL.
    #[error("prometheus URL {0:?}: only http:// URLs are supported")]
    Url(String),
    /// The query interval is zero.
    #[error("the Prometheus query interval must be above zero")]
    Interval,
}

/// How `gantry run` gets node load.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeLoadSettings {
    /// The source.
    pub source: LoadSource,
    /// Age beyond which a sample is stale.
    pub max_age: Duration,
    /// How long a placement takes to show in measurements.
    pub lag: Duration,
}

impl Default for NodeLoadSettings {
    fn default() -> Self {
        NodeLoadSettings {
            source: LoadSource::None,
            max_age: DEFAULT_MAX_AGE,
            lag: DEFAULT_LAG,
        }
    }
}

/// One node's utilisation as a source read it, stamped with wall-clock time.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeReading {
    /// The node's name.
    pub node: String,
    /// cpu utilisation, `0..=1`.
    pub cpu: f64,
    /// Memory utilisation, `0..=1`.
    pub memory: f64,
    /// When it was measured.
    pub at: SystemTime,
}

impl NodeLoadSettings {
    /// Checks the settings.
    pub fn validate(&self) -> Result<(), NodeLoadError> {
        if let LoadSource::Prometheus(p) = &self.source {
            if !p.url.starts_with("http://") {
                return Err(NodeLoadError::Url(p.url.clone()));
            }
            if p.interval.is_zero() {
                return Err(NodeLoadError::Interval);
            }
        }
        Ok(())
    }

    /// A reading measured at `at` (wall clock) as a sample on the driver's clock, where it is
    /// `now` while the wall clock says `wall_now`. A measurement from before the driver's clock
    /// began starts at zero with its remaining freshness only; one from the future (clock
    /// skew) counts as taken now.
    pub fn sample(
        &self,
        cpu: f64,
        memory: f64,
        at: SystemTime,
        now: Duration,
        wall_now: SystemTime,
    ) -> LoadSample {
        let age = wall_now.duration_since(at).unwrap_or(Duration::ZERO);
        let taken_at = now.saturating_sub(age);
        let before_start = age.saturating_sub(now);
        LoadSample {
            cpu,
            memory,
            taken_at,
            reflects_placements_before: taken_at.saturating_sub(self.lag),
            max_age: Some(self.max_age.saturating_sub(before_start)),
        }
    }

    /// The sample a node's annotations give, for the annotation source: `None` for another
    /// source, a node without the annotations, or malformed ones (logged).
    pub fn from_annotations(
        &self,
        node: &NodeModel,
        now: Duration,
        wall_now: SystemTime,
    ) -> Option<LoadSample> {
        if self.source != LoadSource::Annotations {
            return None;
        }
        match load_from_annotations(&node.annotations) {
            Ok(Some(load)) => match load.timestamp {
                Some(at) => Some(self.sample(load.cpu, load.memory, at, now, wall_now)),
                None => {
                    tracing::warn!(node = %node.name, "load annotations without gantry.io/metrics-timestamp ignored");
                    None
                }
            },
            Ok(None) => None,
            Err(e) => {
                tracing::warn!(node = %node.name, error = %e, "load annotations ignored");
                None
            }
        }
    }
}

/// Starts the Prometheus task: it queries every `interval` and sends what it reads to
/// `inputs` until the scheduling thread is gone.
pub fn spawn_prometheus(
    source: PrometheusSource,
    mut report: impl FnMut(Vec<NodeReading>) -> bool + Send + 'static,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let client = Client::builder(TokioExecutor::new()).build(HttpConnector::new());
        let mut ticker = tokio::time::interval(source.interval);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut last_error: Option<String> = None;
        loop {
            ticker.tick().await;
            match read(&client, &source).await {
                Ok(readings) => {
                    if last_error.take().is_some() {
                        tracing::info!(url = %source.url, "node load from Prometheus again");
                    }
                    tracing::debug!(nodes = readings.len(), "node load read");
                    if !report(readings) {
                        return;
                    }
                }
                Err(e) => {
                    if last_error.as_deref() != Some(e.as_str()) {
                        tracing::warn!(url = %source.url, error = %e, "cannot read node load; samples age");
                    }
                    last_error = Some(e);
                }
            }
        }
    })
}

/// Both queries, joined per node.
async fn read(
    client: &Client<HttpConnector, Empty<Bytes>>,
    source: &PrometheusSource,
) -> Result<Vec<NodeReading>, String> {
    let cpu = query(client, &source.url, &source.cpu_query, &source.node_label).await?;
    let mut memory = query(
        client,
        &source.url,
        &source.memory_query,
        &source.node_label,
    )
    .await?;
    Ok(join(cpu, &mut memory))
}

/// Readings of the nodes present in both results, at the older of the two times.
fn join(
    cpu: HashMap<String, (f64, SystemTime)>,
    memory: &mut HashMap<String, (f64, SystemTime)>,
) -> Vec<NodeReading> {
    let mut out: Vec<NodeReading> = cpu
        .into_iter()
        .filter_map(|(node, (c, at_c))| {
            let (m, at_m) = memory.remove(&node)?;
            Some(NodeReading {
                node,
                cpu: c,
                memory: m,
                at: at_c.min(at_m),
            })
        })
        .collect();
    out.sort_by(|a, b| a.node.cmp(&b.node));
    out
}

/// One instant query: value and time per node.
async fn query(
    client: &Client<HttpConnector, Empty<Bytes>>,
    base: &str,
    promql: &str,
    node_label: &str,
) -> Result<HashMap<String, (f64, SystemTime)>, String> {
    let encoded: String = form_urlencoded::byte_serialize(promql.as_bytes()).collect();
    let url = format!(
        "{}/api/v1/query?query={encoded}",
        base.trim_end_matches('/')
    );
    let uri: hyper::Uri = url.parse().map_err(|e| format!("{url}: {e}"))?;
    let response = tokio::time::timeout(QUERY_TIMEOUT, async {
        let response = client.get(uri).await.map_err(|e| e.to_string())?;
        let status = response.status();
        let body = response
            .into_body()
            .collect()
            .await
            .map_err(|e| e.to_string())?
            .to_bytes();
        Ok::<_, String>((status, body))
    })
    .await
    .map_err(|_| format!("no answer within {QUERY_TIMEOUT:?}"))??;
    parse_response(&response.1, node_label)
        .map_err(|e| format!("query {promql:?}: HTTP {}: {e}", response.0.as_u16()))
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ApiResponse {
    status: String,
    #[serde(default)]
    data: Option<ApiData>,
    #[serde(default)]
    error: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ApiData {
    result_type: String,
    result: Vec<VectorSample>,
}

#[derive(Debug, Deserialize)]
struct VectorSample {
    metric: HashMap<String, String>,
    value: (f64, String),
}

/// The node name a label value gives: `host:9100` names `host`.
fn node_name(value: &str) -> &str {
    match value.rsplit_once(':') {
        Some((host, port)) if !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit()) => host,
        _ => value,
    }
}

/// An instant-vector answer as value and time per node; values are clamped into `0..=1`,
/// series without the label or with a value that is not a number are left out.
fn parse_response(
    body: &[u8],
    node_label: &str,
) -> Result<HashMap<String, (f64, SystemTime)>, String> {
    let response: ApiResponse =
        serde_json::from_slice(body).map_err(|e| format!("not a Prometheus answer: {e}"))?;
    if response.status != "success" {
        return Err(response.error.unwrap_or(response.status));
    }
    let data = response.data.ok_or("no data in the answer")?;
    if data.result_type != "vector" {
        return Err(format!(
            "the query gives a {}, not an instant vector",
            data.result_type
        ));
    }
    let mut out = HashMap::new();
    for s in data.result {
        let Some(label) = s.metric.get(node_label) else {
            continue;
        };
        let Ok(value) = s.value.1.parse::<f64>() else {
            continue;
        };
        let at = Duration::try_from_secs_f64(s.value.0)
            .ok()
            .and_then(|d| SystemTime::UNIX_EPOCH.checked_add(d));
        let Some(at) = at.filter(|_| !value.is_nan()) else {
            continue;
        };
        out.insert(node_name(label).to_string(), (value.clamp(0.0, 1.0), at));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use gantry_core::model::load::{
        CPU_UTILIZATION_ANNOTATION, MEMORY_UTILIZATION_ANNOTATION, METRICS_TIMESTAMP_ANNOTATION,
    };
    use gantry_core::testing::node;

    const T0: u64 = 1_700_000_000;

    fn wall(secs: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(secs)
    }

    fn settings(source: LoadSource) -> NodeLoadSettings {
        NodeLoadSettings {
            source,
            max_age: Duration::from_secs(60),
            lag: Duration::from_secs(10),
        }
    }

    #[test]
    fn readings_become_samples_on_the_drivers_clock() {
        let s = settings(LoadSource::None);
        let now = Duration::from_secs(500);
        // Measured 20 s ago: 480 s on the driver's clock.
        let sample = s.sample(0.5, 0.25, wall(T0 - 20), now, wall(T0));
        assert_eq!(sample.taken_at, Duration::from_secs(480));
        assert_eq!(sample.reflects_placements_before, Duration::from_secs(470));
        assert_eq!(sample.max_age, Some(Duration::from_secs(60)));
        assert!(sample.is_fresh(Duration::from_secs(540)));
        assert!(!sample.is_fresh(Duration::from_secs(541)));
        // From the future: taken now.
        let ahead = s.sample(0.5, 0.25, wall(T0 + 5), now, wall(T0));
        assert_eq!(ahead.taken_at, now);
        // From before the driver's clock began: only its remaining freshness is left.
        let early = s.sample(0.5, 0.25, wall(T0 - 50), Duration::from_secs(10), wall(T0));
        assert_eq!(early.taken_at, Duration::ZERO);
        assert_eq!(early.max_age, Some(Duration::from_secs(20)));
        assert!(early.is_fresh(Duration::from_secs(20)));
        assert!(!early.is_fresh(Duration::from_secs(21)));
        let ancient = s.sample(
            0.5,
            0.25,
            wall(T0 - 3600),
            Duration::from_secs(10),
            wall(T0),
        );
        assert!(!ancient.is_fresh(Duration::from_secs(10)));
    }

    #[test]
    fn annotations_are_read_only_by_the_annotation_source() {
        let n = node("n1")
            .annotation(CPU_UTILIZATION_ANNOTATION, "0.4")
            .annotation(MEMORY_UTILIZATION_ANNOTATION, "0.6")
            .annotation(METRICS_TIMESTAMP_ANNOTATION, "2023-11-14T22:13:10Z")
            .build();
        let now = Duration::from_secs(100);
        let at = SystemTime::UNIX_EPOCH + Duration::from_secs(1_699_999_990);
        let sample = settings(LoadSource::Annotations)
            .from_annotations(&n, now, at + Duration::from_secs(30))
            .expect("a sample");
        assert_eq!((sample.cpu, sample.memory), (0.4, 0.6));
        assert_eq!(sample.taken_at, Duration::from_secs(70));
        assert_eq!(
            settings(LoadSource::None).from_annotations(&n, now, at),
            None
        );
        // Without a timestamp, or malformed: ignored.
        let untimed = node("n2")
            .annotation(CPU_UTILIZATION_ANNOTATION, "0.4")
            .annotation(MEMORY_UTILIZATION_ANNOTATION, "0.6")
            .build();
        let bad = node("n3")
            .annotation(CPU_UTILIZATION_ANNOTATION, "4")
            .annotation(MEMORY_UTILIZATION_ANNOTATION, "0.6")
            .annotation(METRICS_TIMESTAMP_ANNOTATION, "2023-11-14T22:13:10Z")
            .build();
        for n in [&untimed, &bad] {
            assert_eq!(
                settings(LoadSource::Annotations).from_annotations(n, now, at),
                None
            );
        }
    }

    #[test]
    fn settings_are_checked() {
        let prom = |url: &str, secs| {
            settings(LoadSource::Prometheus(PrometheusSource {
                url: url.to_string(),
                cpu_query: default_cpu_query("instance"),
                memory_query: default_memory_query("instance"),
                node_label: "instance".to_string(),
                interval: Duration::from_secs(secs),
            }))
        };
        assert_eq!(prom("http://p:9090", 15).validate(), Ok(()));
        assert_eq!(
            prom("https://p:9090", 15).validate(),
            Err(NodeLoadError::Url("https://p:9090".to_string()))
        );
        assert_eq!(prom("http://p", 0).validate(), Err(NodeLoadError::Interval));
        assert_eq!(
            default_cpu_query("node"),
            "1 - avg by (node) (rate(node_cpu_seconds_total{mode=\"idle\"}[1m]))"
        );
    }

    #[test]
    fn answers_map_to_nodes() {
        let body = br#"{"status":"success","data":{"resultType":"vector","result":[
            {"metric":{"instance":"n1:9100"},"value":[1700000000.5,"0.25"]},
            {"metric":{"instance":"n2"},"value":[1700000000,"1.2"]},
            {"metric":{"instance":"n3"},"value":[1700000000,"-0.01"]},
            {"metric":{"instance":"n4"},"value":[1700000000,"NaN"]},
            {"metric":{"instance":"n5"},"value":[1e300,"0.5"]},
            {"metric":{"instance":"n6"},"value":[-1,"0.5"]},
            {"metric":{"job":"x"},"value":[1700000000,"0.5"]},
            {"metric":{"instance":"[::1]:9100"},"value":[1700000000,"0.5"]}
        ]}}"#;
        let m = parse_response(body, "instance").unwrap();
        assert_eq!(
            m.get("n1"),
            Some(&(
                0.25,
                SystemTime::UNIX_EPOCH + Duration::from_millis(1_700_000_000_500)
            ))
        );
        assert_eq!(m.get("n2").map(|v| v.0), Some(1.0), "clamped");
        assert_eq!(m.get("n3").map(|v| v.0), Some(0.0), "clamped");
        assert!(!m.contains_key("n4"));
        assert!(
            !m.contains_key("n5") && !m.contains_key("n6"),
            "impossible times"
        );
        assert!(m.contains_key("[::1]"));
        assert_eq!(m.len(), 4);
        let error = br#"{"status":"error","errorType":"bad_data","error":"parse error at char 3"}"#;
        assert_eq!(
            parse_response(error, "instance"),
            Err("parse error at char 3".to_string())
        );
        let matrix = br#"{"status":"success","data":{"resultType":"matrix","result":[]}}"#;
        assert_eq!(
            parse_response(matrix, "instance"),
            Err("the query gives a matrix, not an instant vector".to_string())
        );
        assert!(parse_response(b"<html>", "instance").is_err());
    }

    #[test]
    fn both_resources_are_needed_and_the_older_time_wins() {
        let at = |s| SystemTime::UNIX_EPOCH + Duration::from_secs(s);
        let cpu: HashMap<String, (f64, SystemTime)> = [
            ("a".to_string(), (0.1, at(10))),
            ("b".to_string(), (0.2, at(10))),
        ]
        .into();
        let mut memory: HashMap<String, (f64, SystemTime)> = [
            ("a".to_string(), (0.3, at(8))),
            ("c".to_string(), (0.4, at(10))),
        ]
        .into();
        assert_eq!(
            join(cpu, &mut memory),
            [NodeReading {
                node: "a".to_string(),
                cpu: 0.1,
                memory: 0.3,
                at: at(8),
            }]
        );
    }
}
