//! The two text formats `/metrics` speaks, and the choice between them by the scraper's
//! `Accept` header, as Prometheus' Go client chooses: the Prometheus text format 0.0.4 by
//! default, as kube-scheduler serves it, and OpenMetrics 1.0 to a scraper that prefers it.
//!
//! prometheus-client writes OpenMetrics only, and its encoder cannot be given another
//! writer (the type a metric encodes itself into is private to the crate). So the 0.0.4
//! text is a conversion of its OpenMetrics output, a line-based format whose every line
//! this crate knows the shape of: the `# EOF` and `# UNIT` lines go, a counter family takes
//! its `_total` name in its `# HELP` and `# TYPE` lines, exemplars go, and every number is
//! written as Go writes a float (`1`, `0.005`, `1e-05`, `2.5e+06`, `+Inf`), `le` bounds
//! included and last among a bucket's labels, which is what dashboards and recording rules
//! written against kube-scheduler match.

use prometheus_client::collector::Collector;
use prometheus_client::encoding::DescriptorEncoder;
use prometheus_client::registry::Metric;

/// Metric families with their help texts exactly as given, for a registry to encode as one
/// collector: prometheus-client's own registration appends a period to every help text,
/// and kube-scheduler's do not all end in one.
#[derive(Debug, Default)]
pub struct Families {
    families: Vec<(&'static str, &'static str, Box<dyn Metric>)>,
}

impl Families {
    /// Adds a family named `name` (a counter without its `_total`) with help `help`.
    pub fn add(&mut self, name: &'static str, help: &'static str, metric: impl Metric) {
        self.families.push((name, help, Box::new(metric)));
    }
}

impl Collector for Families {
    fn encode(&self, mut encoder: DescriptorEncoder) -> std::fmt::Result {
        for (name, help, metric) in &self.families {
            metric.encode(encoder.encode_descriptor(name, help, None, metric.metric_type())?)?;
        }
        Ok(())
    }
}

/// Content type of the Prometheus text format 0.0.4.
pub const TEXT_CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";
/// Content type of the OpenMetrics 1.0 text format.
pub const OPENMETRICS_CONTENT_TYPE: &str =
    "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// The formats `/metrics` can answer in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// The Prometheus text format 0.0.4.
    Text,
    /// OpenMetrics 1.0.
    OpenMetrics,
}

impl Format {
    /// The format for a request with this `Accept` header: the first of the two formats
    /// among the media ranges by decreasing quality (a missing `q` is 1, ties keep their
    /// order); the 0.0.4 text when the header names neither, or is absent.
    pub fn negotiate(accept: Option<&str>) -> Format {
        let Some(accept) = accept else {
            return Format::Text;
        };
        let mut ranges: Vec<(f64, Option<Format>)> = accept
            .split(',')
            .map(|range| {
                let mut parts = range.split(';').map(str::trim);
                let media = parts.next().unwrap_or("").to_ascii_lowercase();
                let mut q = 1.0;
                let mut version = None;
                for param in parts {
                    if let Some((key, value)) = param.split_once('=') {
                        let value = value.trim().trim_matches('"');
                        match key.trim().to_ascii_lowercase().as_str() {
                            "q" => q = value.parse().unwrap_or(0.0),
                            "version" => version = Some(value.to_string()),
                            _ => {}
                        }
                    }
                }
                let format = match (media.as_str(), version.as_deref()) {
                    ("text/plain", None | Some("0.0.4")) => Some(Format::Text),
                    ("application/openmetrics-text", None | Some("0.0.1" | "1.0.0")) => {
                        Some(Format::OpenMetrics)
                    }
                    _ => None,
                };
                (q, format)
            })
            .filter(|(q, _)| *q > 0.0)
            .collect();
        ranges.sort_by(|a, b| b.0.total_cmp(&a.0));
        ranges
            .into_iter()
            .find_map(|(_, format)| format)
            .unwrap_or(Format::Text)
    }

    /// The content type of an answer in this format.
    pub fn content_type(self) -> &'static str {
        match self {
            Format::Text => TEXT_CONTENT_TYPE,
            Format::OpenMetrics => OPENMETRICS_CONTENT_TYPE,
        }
    }
}

/// prometheus-client's OpenMetrics text, in the Prometheus text format 0.0.4.
pub fn openmetrics_to_text(openmetrics: &str) -> String {
    let mut out = String::with_capacity(openmetrics.len());
    // A family's `# HELP` line comes before its `# TYPE` line, which says whether the name
    // takes `_total`.
    let mut help: Option<(&str, &str)> = None;
    for line in openmetrics.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let (name, text) = rest.split_once(' ').unwrap_or((rest, ""));
            help = Some((name, text));
        } else if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap_or((rest, "unknown"));
            let (name, kind) = match kind {
                "counter" => (format!("{name}_total"), "counter"),
                "gauge" | "histogram" | "summary" => (name.to_string(), kind),
                "info" => (format!("{name}_info"), "gauge"),
                _ => (name.to_string(), "untyped"),
            };
            if let Some((_, text)) = help.take() {
                out.push_str(&format!("# HELP {name} {text}\n"));
            }
            out.push_str(&format!("# TYPE {name} {kind}\n"));
        } else if line.starts_with('#') {
            // `# UNIT` and `# EOF` have no counterpart in 0.0.4.
        } else if !line.is_empty() {
            out.push_str(&sample(line));
            out.push('\n');
        }
    }
    out
}

/// One sample line: its name, its labels (`le` last, its bound as Go writes it) and its
/// value as Go writes it; the timestamp and exemplar dropped (gantry writes neither).
fn sample(line: &str) -> String {
    let name_end = line.find(['{', ' ']).unwrap_or(line.len());
    let name = &line[..name_end];
    let mut rest = &line[name_end..];
    let mut labels: Vec<(&str, String)> = Vec::new();
    if let Some(body) = rest.strip_prefix('{') {
        let (pairs, after) = split_labels(body);
        labels = pairs;
        rest = after;
    }
    let value = rest.split_whitespace().next().unwrap_or("");
    let value = parse_float(value).map_or_else(|| value.to_string(), go_float);
    if let Some(i) = labels.iter().position(|(k, _)| *k == "le") {
        let (k, v) = labels.remove(i);
        let bound = parse_float(&v).map_or(v, go_float);
        labels.push((k, bound));
    }
    let mut out = String::from(name);
    if !labels.is_empty() {
        out.push('{');
        let pairs: Vec<String> = labels.iter().map(|(k, v)| format!("{k}=\"{v}\"")).collect();
        out.push_str(&pairs.join(","));
        out.push('}');
    }
    out.push(' ');
    out.push_str(&value);
    out
}

/// The label pairs of `body` (what follows `{`; values kept escaped as written) and what
/// follows the closing `}`.
fn split_labels(body: &str) -> (Vec<(&str, String)>, &str) {
    let mut pairs = Vec::new();
    let mut rest = body;
    loop {
        rest = rest.trim_start_matches(',');
        if let Some(after) = rest.strip_prefix('}') {
            return (pairs, after);
        }
        let Some((key, after_key)) = rest.split_once("=\"") else {
            return (pairs, "");
        };
        let mut value = String::new();
        let mut chars = after_key.char_indices();
        let mut end = after_key.len();
        while let Some((i, c)) = chars.next() {
            match c {
                '\\' => {
                    value.push(c);
                    if let Some((_, escaped)) = chars.next() {
                        value.push(escaped);
                    }
                }
                '"' => {
                    end = i + 1;
                    break;
                }
                _ => value.push(c),
            }
        }
        pairs.push((key, value));
        rest = &after_key[end..];
    }
}

fn parse_float(s: &str) -> Option<f64> {
    match s {
        "+Inf" => Some(f64::INFINITY),
        "-Inf" => Some(f64::NEG_INFINITY),
        "NaN" => Some(f64::NAN),
        _ => s.parse().ok(),
    }
}

/// `v` as Go's `strconv.FormatFloat(v, 'g', -1, 64)` writes it, the way Prometheus' Go
/// client writes every number of the text format: the shortest digits that read back as
/// `v`, in exponent form when the exponent is below -4 or at least 6.
pub fn go_float(v: f64) -> String {
    if v.is_nan() {
        return "NaN".to_string();
    }
    if v.is_infinite() {
        return if v > 0.0 { "+Inf" } else { "-Inf" }.to_string();
    }
    if v == 0.0 {
        return if v.is_sign_negative() { "-0" } else { "0" }.to_string();
    }
    // Rust's exponent form has the shortest round-trip digits: `d.ddde-5`.
    let exp_form = format!("{:e}", v.abs());
    let (mantissa, exp) = exp_form.split_once('e').unwrap_or((&exp_form, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    let sign = if v < 0.0 { "-" } else { "" };
    if !(-4..6).contains(&exp) {
        let (first, rest) = digits.split_at(1);
        let fraction = if rest.is_empty() {
            String::new()
        } else {
            format!(".{rest}")
        };
        let exp_sign = if exp < 0 { '-' } else { '+' };
        return format!("{sign}{first}{fraction}e{exp_sign}{:02}", exp.abs());
    }
    // Plain form: the decimal point after `exp + 1` digits.
    let point = exp + 1;
    let body = if point <= 0 {
        let zeros = usize::try_from(-point).unwrap_or(0);
        format!("0.{}{digits}", "0".repeat(zeros))
    } else {
        let point = usize::try_from(point).unwrap_or(0);
        if digits.len() <= point {
            format!("{digits}{}", "0".repeat(point - digits.len()))
        } else {
            format!("{}.{}", &digits[..point], &digits[point..])
        }
    };
    format!("{sign}{body}")
}

#[cfg(test)]
mod tests {
    use prometheus_client::metrics::counter::Counter;
    use prometheus_client::metrics::family::Family;
    use prometheus_client::metrics::gauge::Gauge;
    use prometheus_client::metrics::histogram::Histogram;
    use prometheus_client::registry::Registry;

    use super::*;

    #[test]
    fn numbers_are_written_as_go_writes_them() {
        for (v, go) in [
            (1.0, "1"),
            (0.0, "0"),
            (-1.0, "-1"),
            (0.005, "0.005"),
            (0.0001, "0.0001"),
            (1e-5, "1e-05"),
            (1.5e-5, "1.5e-05"),
            (2.25e-5, "2.25e-05"),
            (0.001, "0.001"),
            (16.384, "16.384"),
            (64.0, "64"),
            (100000.0, "100000"),
            (123456.0, "123456"),
            (1e6, "1e+06"),
            (1234567.0, "1.234567e+06"),
            (1.7e9, "1.7e+09"),
            (1.8446744073709552e19, "1.8446744073709552e+19"),
            (-0.25, "-0.25"),
            (f64::INFINITY, "+Inf"),
            (f64::NEG_INFINITY, "-Inf"),
            (f64::NAN, "NaN"),
            (1e21, "1e+21"),
        ] {
            assert_eq!(go_float(v), go, "{v}");
        }
    }

    #[test]
    fn the_text_format_names_counters_with_total_and_drops_what_0_0_4_lacks() {
        let mut families = Families::default();
        let counter = Family::<Vec<(String, String)>, Counter>::default();
        counter
            .get_or_create(&vec![("result".into(), "scheduled".into())])
            .inc_by(3);
        families.add("attempts", "[STABLE] Attempts.", counter);
        let gauge = Gauge::<i64>::default();
        gauge.set(1_234_567);
        families.add("pods", "Pods", gauge);
        let histogram = Histogram::new([0.005, 1.0, 2.5]);
        histogram.observe(0.5);
        histogram.observe(2.0);
        families.add("latency_seconds", "Latency.", histogram);
        let mut registry = Registry::default();
        registry.register_collector(Box::new(families));
        let mut openmetrics = String::new();
        prometheus_client::encoding::text::encode(&mut openmetrics, &registry).unwrap();
        assert!(openmetrics.contains("le=\"1.0\""), "{openmetrics}");
        let text = openmetrics_to_text(&openmetrics);
        assert_eq!(
            text,
            "# HELP attempts_total [STABLE] Attempts.\n\
             # TYPE attempts_total counter\n\
             attempts_total{result=\"scheduled\"} 3\n\
             # HELP pods Pods\n\
             # TYPE pods gauge\n\
             pods 1.234567e+06\n\
             # HELP latency_seconds Latency.\n\
             # TYPE latency_seconds histogram\n\
             latency_seconds_sum 2.5\n\
             latency_seconds_count 2\n\
             latency_seconds_bucket{le=\"0.005\"} 0\n\
             latency_seconds_bucket{le=\"1\"} 1\n\
             latency_seconds_bucket{le=\"2.5\"} 2\n\
             latency_seconds_bucket{le=\"+Inf\"} 2\n"
        );
    }

    #[test]
    fn le_goes_last_and_escaped_label_values_stay_as_written() {
        let line = r#"x_bucket{le="4.0",path="a\"b,c}",profile="p"} 7"#;
        assert_eq!(
            sample(line),
            r#"x_bucket{path="a\"b,c}",profile="p",le="4"} 7"#
        );
    }

    #[test]
    fn the_scraper_chooses_by_quality_and_gets_0_0_4_by_default() {
        // Prometheus 2.x's own Accept header.
        let prometheus = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
        for (accept, format) in [
            (None, Format::Text),
            (Some(""), Format::Text),
            (Some("*/*"), Format::Text),
            (Some("text/plain"), Format::Text),
            (Some(prometheus), Format::OpenMetrics),
            (Some("application/openmetrics-text"), Format::OpenMetrics),
            (
                Some("text/plain;version=0.0.4;q=0.9, application/openmetrics-text;q=0.5"),
                Format::Text,
            ),
            (
                Some("application/openmetrics-text; version=2.0.0, text/plain;q=0.1"),
                Format::Text,
            ),
            (Some("application/openmetrics-text;q=0"), Format::Text),
        ] {
            assert_eq!(Format::negotiate(accept), format, "{accept:?}");
        }
        assert_eq!(Format::Text.content_type(), TEXT_CONTENT_TYPE);
    }
}
