//! The webhook's metrics (Prometheus, OpenMetrics text).

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

/// Labels of routed pods: `scheduler` (`gantry` or `default`) and `source` (`pod`,
/// `namespace` or `config`: where the share came from).
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RoutedLabels {
    /// `gantry` or `default`.
    pub scheduler: &'static str,
    /// `pod`, `namespace` or `config`.
    pub source: &'static str,
}

/// Label `reason` of skipped pods.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SkippedLabels {
    /// `excluded_namespace`, `other_scheduler`, `already_gantry` or `not_a_pod_creation`.
    pub reason: &'static str,
}

/// Labels of invalid share annotations: `level` (`pod` or `namespace`) and `annotation`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct InvalidLabels {
    /// `pod` or `namespace`.
    pub level: &'static str,
    /// The annotation's name.
    pub annotation: &'static str,
}

/// Label `reason` of connections the server closed on a client.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ClosedLabels {
    /// `refused`, `evicted`, `handshake_timeout`, `handshake_failed`, `header_timeout`,
    /// `bad_request` or `body_timeout`.
    pub reason: &'static str,
}

/// The counters, and the number of open connections.
pub struct Metrics {
    registry: Registry,
    /// Pods whose scheduler was decided by the split.
    pub routed: Family<RoutedLabels, Counter>,
    /// Pods left as they were, by reason.
    pub skipped: Family<SkippedLabels, Counter>,
    /// Share annotations that could not be read.
    pub invalid: Family<InvalidLabels, Counter>,
    /// AdmissionReview requests that could not be read (answered 400).
    pub malformed: Counter,
    /// Connections the server closed on a client, by reason.
    pub connections_closed: Family<ClosedLabels, Counter>,
    /// Client connections open now.
    pub open_connections: Gauge,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// Registers the counters.
    pub fn new() -> Self {
        let mut registry = Registry::default();
        let routed = Family::<RoutedLabels, Counter>::default();
        registry.register(
            "gantry_webhook_pods_routed",
            "New pods routed by the canary split, by scheduler and by where the share came from",
            routed.clone(),
        );
        let skipped = Family::<SkippedLabels, Counter>::default();
        registry.register(
            "gantry_webhook_pods_skipped",
            "Admission requests left unchanged without a split decision, by reason",
            skipped.clone(),
        );
        let invalid = Family::<InvalidLabels, Counter>::default();
        registry.register(
            "gantry_webhook_invalid_annotations",
            "Share annotations that could not be read (the next level applied)",
            invalid.clone(),
        );
        let malformed = Counter::default();
        registry.register(
            "gantry_webhook_malformed_requests",
            "AdmissionReview requests that could not be read (answered 400)",
            malformed.clone(),
        );
        let connections_closed = Family::<ClosedLabels, Counter>::default();
        registry.register(
            "gantry_webhook_connections_closed",
            "Client connections closed by the server: over the limit, idle at the limit, or past a deadline or malformed, by reason",
            connections_closed.clone(),
        );
        let open_connections = Gauge::default();
        registry.register(
            "gantry_webhook_open_connections",
            "Client connections open now",
            open_connections.clone(),
        );
        Metrics {
            registry,
            routed,
            skipped,
            invalid,
            malformed,
            connections_closed,
            open_connections,
        }
    }

    /// The metrics in the OpenMetrics text format.
    pub fn render(&self) -> String {
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
    fn names_and_labels() {
        let m = Metrics::new();
        m.routed
            .get_or_create(&RoutedLabels {
                scheduler: "gantry",
                source: "namespace",
            })
            .inc();
        m.skipped
            .get_or_create(&SkippedLabels {
                reason: "other_scheduler",
            })
            .inc();
        m.invalid
            .get_or_create(&InvalidLabels {
                level: "pod",
                annotation: "gantry.io/rollout",
            })
            .inc();
        m.malformed.inc();
        m.connections_closed
            .get_or_create(&ClosedLabels { reason: "evicted" })
            .inc();
        m.open_connections.set(3);
        let text = m.render();
        for series in [
            "gantry_webhook_pods_routed_total{scheduler=\"gantry\",source=\"namespace\"} 1",
            "gantry_webhook_pods_skipped_total{reason=\"other_scheduler\"} 1",
            "gantry_webhook_invalid_annotations_total{level=\"pod\",annotation=\"gantry.io/rollout\"} 1",
            "gantry_webhook_malformed_requests_total 1",
            "gantry_webhook_connections_closed_total{reason=\"evicted\"} 1",
            "gantry_webhook_open_connections 3",
        ] {
            assert!(text.contains(series), "no {series} in\n{text}");
        }
    }
}
