//! Just enough of the Prometheus text format to read histograms and counters from a
//! scheduler's or an API server's `/metrics`, and `histogram_quantile` as Prometheus computes
//! it.

/// One line of an exposition: `name{labels} value`.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    /// The series name (with `_bucket`, `_total`, ... suffixes).
    pub name: String,
    /// Its labels, in order.
    pub labels: Vec<(String, String)>,
    /// Its value.
    pub value: f64,
}

impl Sample {
    /// The value of label `key`.
    pub fn label(&self, key: &str) -> Option<&str> {
        self.labels
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

/// Every sample of `text`; comments and lines that do not parse are skipped.
pub fn parse(text: &str) -> Vec<Sample> {
    text.lines().filter_map(parse_line).collect()
}

fn parse_line(line: &str) -> Option<Sample> {
    let line = line.trim();
    if line.is_empty() || line.starts_with('#') {
        return None;
    }
    let (name, labels, rest) = match line.find('{') {
        Some(open) => {
            let (labels, after) = parse_labels(&line[open + 1..])?;
            (&line[..open], labels, after)
        }
        None => {
            let (name, rest) = line.split_once(' ')?;
            (name, Vec::new(), rest)
        }
    };
    let value = parse_value(rest.split_whitespace().next()?)?;
    Some(Sample {
        name: name.to_string(),
        labels,
        value,
    })
}

/// Parses `k="v",k2="v2"}` and returns the labels and what follows the `}`.
fn parse_labels(mut s: &str) -> Option<(Vec<(String, String)>, &str)> {
    let mut labels = Vec::new();
    loop {
        s = s.trim_start_matches([',', ' ']);
        if let Some(rest) = s.strip_prefix('}') {
            return Some((labels, rest));
        }
        let (key, rest) = s.split_once('=')?;
        let mut chars = rest.strip_prefix('"')?.char_indices();
        let mut value = String::new();
        let end = loop {
            match chars.next()? {
                (i, '"') => break i,
                (_, '\\') => match chars.next()?.1 {
                    'n' => value.push('\n'),
                    c => value.push(c),
                },
                (_, c) => value.push(c),
            }
        };
        labels.push((key.trim().to_string(), value));
        s = &rest[1 + end + 1..];
    }
}

fn parse_value(s: &str) -> Option<f64> {
    match s {
        "+Inf" => Some(f64::INFINITY),
        "-Inf" => Some(f64::NEG_INFINITY),
        _ => s.parse().ok(),
    }
}

/// The buckets of histogram `name` (upper bound, cumulative count), summed over all its
/// series (every other label combination), sorted by bound; `None` if it has no bucket or
/// no observation.
pub fn histogram(samples: &[Sample], name: &str) -> Option<Vec<(f64, f64)>> {
    let bucket = format!("{name}_bucket");
    let mut buckets: Vec<(f64, f64)> = Vec::new();
    for s in samples.iter().filter(|s| s.name == bucket) {
        let le = parse_value(s.label("le")?)?;
        match buckets.iter_mut().find(|(b, _)| *b == le) {
            Some((_, count)) => *count += s.value,
            None => buckets.push((le, s.value)),
        }
    }
    buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
    let total = buckets.last()?.1;
    (total > 0.0).then_some(buckets)
}

/// The `q` quantile of cumulative `buckets` the way Prometheus' `histogram_quantile` does:
/// linear interpolation inside the bucket where the rank falls (from 0 for the first bucket);
/// a rank in the `+Inf` bucket gives the largest finite bound.
pub fn quantile(q: f64, buckets: &[(f64, f64)]) -> Option<f64> {
    let total = buckets.last()?.1;
    if total <= 0.0 {
        return None;
    }
    let rank = q * total;
    let mut lower = (0.0, 0.0);
    for &(le, count) in buckets {
        if count >= rank {
            if le.is_infinite() {
                return Some(lower.0);
            }
            if count == lower.1 {
                return Some(le);
            }
            return Some(lower.0 + (le - lower.0) * (rank - lower.1) / (count - lower.1));
        }
        lower = (le, count);
    }
    Some(lower.0)
}

/// The sum of series `name` over the samples whose labels include all of `with`.
pub fn sum(samples: &[Sample], name: &str, with: &[(&str, &str)]) -> f64 {
    samples
        .iter()
        .filter(|s| s.name == name && with.iter().all(|(k, v)| s.label(k) == Some(*v)))
        // A fold from +0: `sum` of no f64 gives -0.
        .fold(0.0, |total, s| total + s.value)
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = r#"# HELP h A histogram.
# TYPE h histogram
h_bucket{le="0.5",attempts="1"} 2
h_bucket{le="1.0",attempts="1"} 6
h_bucket{le="+Inf",attempts="1"} 8
h_bucket{attempts="2",le="0.5"} 0
h_bucket{attempts="2",le="1.0"} 0
h_bucket{attempts="2",le="+Inf"} 2
h_count{attempts="1"} 8
plain 3.5
req_total{code="201",resource="pods",subresource="binding",verb="POST"} 10
req_total{code="409",resource="pods",subresource="binding",verb="POST"} 2
req_total{code="201",resource="pods",subresource="",verb="POST"} 7
weird{msg="a \"quoted\", and } brace"} 1
"#;

    #[test]
    fn parses_names_labels_and_values() {
        let s = parse(TEXT);
        assert_eq!(s.len(), 12);
        assert_eq!(s[7].name, "plain");
        assert_eq!(s[7].value, 3.5);
        assert_eq!(s[2].label("le"), Some("+Inf"));
        assert_eq!(s[11].label("msg"), Some("a \"quoted\", and } brace"));
        assert_eq!(s[11].value, 1.0);
    }

    #[test]
    fn histogram_buckets_are_summed_over_series() {
        let h = histogram(&parse(TEXT), "h").unwrap();
        assert_eq!(h, vec![(0.5, 2.0), (1.0, 6.0), (f64::INFINITY, 10.0)]);
        assert!(histogram(&parse(TEXT), "missing").is_none());
        assert!(histogram(&parse("e_bucket{le=\"+Inf\"} 0"), "e").is_none());
    }

    #[test]
    fn quantiles_interpolate_like_prometheus() {
        let h = [(0.5, 2.0), (1.0, 6.0), (f64::INFINITY, 10.0)];
        // Rank 1 of 10 falls in the first bucket, from 0 to 0.5.
        assert_eq!(quantile(0.1, &h), Some(0.25));
        // Rank 4: halfway through the second bucket (2..6) from 0.5 to 1.0.
        assert_eq!(quantile(0.4, &h), Some(0.75));
        assert_eq!(quantile(0.6, &h), Some(1.0));
        // Beyond the last finite bound: that bound.
        assert_eq!(quantile(0.99, &h), Some(1.0));
        assert_eq!(quantile(0.5, &[]), None);
    }

    #[test]
    fn sums_counters_by_labels() {
        let s = parse(TEXT);
        let binding = [("resource", "pods"), ("subresource", "binding")];
        assert_eq!(sum(&s, "req_total", &binding), 12.0);
        let ok = [
            ("resource", "pods"),
            ("subresource", "binding"),
            ("code", "201"),
        ];
        assert_eq!(sum(&s, "req_total", &ok), 10.0);
        let none = sum(&s, "req_total", &[("code", "500")]);
        assert_eq!(none, 0.0);
        assert!(none.is_sign_positive(), "prints as 0, not -0");
    }
}
