//! A Prometheus histogram that takes many equal observations at once. Plugin timing counts
//! every node of a sampled cycle as one call with the block's mean duration: thousands of
//! equal observations per cycle, which prometheus-client's histogram would take one by one,
//! a lock each.

use std::sync::{Arc, Mutex, PoisonError};

use prometheus_client::encoding::{EncodeMetric, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::{MetricType, TypedMetric};

/// A histogram with fixed upper bounds (and `+Inf`), shared by its clones.
#[derive(Debug, Clone)]
pub struct BatchHistogram {
    inner: Arc<Mutex<Inner>>,
}

#[derive(Debug)]
struct Inner {
    sum: f64,
    count: u64,
    /// Upper bound and the observations in that bucket alone (the encoder accumulates).
    buckets: Vec<(f64, u64)>,
}

impl BatchHistogram {
    /// A histogram with these upper bounds, in increasing order.
    pub fn new(bounds: impl IntoIterator<Item = f64>) -> Self {
        let buckets = bounds
            .into_iter()
            .chain(std::iter::once(f64::MAX))
            .map(|b| (b, 0))
            .collect();
        BatchHistogram {
            inner: Arc::new(Mutex::new(Inner {
                sum: 0.0,
                count: 0,
                buckets,
            })),
        }
    }

    /// Observes `value` `times` times.
    pub fn observe_many(&self, value: f64, times: u64) {
        if times == 0 {
            return;
        }
        let mut inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        inner.sum += value * times as f64;
        inner.count += times;
        if let Some((_, n)) = inner.buckets.iter_mut().find(|(b, _)| value <= *b) {
            *n += times;
        }
    }
}

impl TypedMetric for BatchHistogram {
    const TYPE: MetricType = MetricType::Histogram;
}

impl EncodeMetric for BatchHistogram {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        let inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        encoder.encode_histogram::<NoLabelSet>(inner.sum, inner.count, &inner.buckets, None)
    }

    fn metric_type(&self) -> MetricType {
        Self::TYPE
    }
}

#[cfg(test)]
mod tests {
    use prometheus_client::encoding::text::encode;
    use prometheus_client::metrics::histogram::Histogram;
    use prometheus_client::registry::Registry;

    use super::*;

    fn render(
        name: &str,
        metric: impl EncodeMetric + Send + Sync + std::fmt::Debug + 'static,
    ) -> String {
        let mut registry = Registry::default();
        registry.register(name, "help", metric);
        let mut text = String::new();
        encode(&mut text, &registry).expect("encodes");
        text
    }

    #[test]
    fn many_at_once_reads_as_prometheus_clients_one_by_one() {
        let bounds = [0.001, 0.01, 0.1];
        let batch = BatchHistogram::new(bounds);
        let single = Histogram::new(bounds);
        // Powers of two: the sums are exact either way.
        for (value, times) in [
            (0.0009765625, 3),
            (0.0078125, 2),
            (0.0625, 1),
            (8.0, 4),
            (0.25, 0),
        ] {
            batch.observe_many(value, times);
            for _ in 0..times {
                single.observe(value);
            }
        }
        batch.observe_many(0.001953125, 1);
        single.observe(0.001953125);
        let text = render("d", batch);
        assert_eq!(text, render("d", single));
        assert!(text.contains("d_bucket{le=\"0.001\"} 3\n"), "{text}");
        assert!(text.contains("d_bucket{le=\"0.01\"} 6\n"), "{text}");
        assert!(text.contains("d_bucket{le=\"0.1\"} 7\n"), "{text}");
        assert!(text.contains("d_bucket{le=\"+Inf\"} 11\n"), "{text}");
        assert!(text.contains("d_count 11\n"), "{text}");
    }
}
