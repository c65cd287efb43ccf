//! What the process is and uses, read at each scrape: the `process_*` families as
//! Prometheus' client libraries define them on Linux (from `/proc/self` and the resource
//! limits; a value that cannot be read is left out, as those libraries leave it), and
//! `go_goroutines`, the one Go runtime family kube-scheduler's dashboards chart, with the
//! nearest thing a Rust process has.

use std::fmt;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use rustix::process::{Resource, getrlimit};

/// The `process_*` families and `go_goroutines`.
#[derive(Debug, Default)]
pub struct ProcessCollector;

/// The fields of `/proc/self/stat` the families read.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Stat {
    /// User and system time, in clock ticks.
    cpu_ticks: u64,
    /// Start after boot, in clock ticks.
    start_ticks: u64,
    /// Virtual memory, in bytes.
    vsize: u64,
    /// Resident memory, in pages.
    rss_pages: u64,
}

/// The fields of a `/proc/PID/stat` line; the command name, in parentheses, may hold
/// spaces and parentheses itself, so fields are counted after the last `)`.
fn parse_stat(line: &str) -> Option<Stat> {
    let after = &line[line.rfind(')')? + 1..];
    // Field 3 (state) is the first after the name.
    let fields: Vec<&str> = after.split_whitespace().collect();
    let field = |n: usize| -> Option<u64> { fields.get(n - 3)?.parse().ok() };
    Some(Stat {
        cpu_ticks: field(14)? + field(15)?,
        start_ticks: field(22)?,
        vsize: field(23)?,
        rss_pages: field(24)?,
    })
}

/// The boot time (`btime`) of `/proc/stat`, in seconds since the Unix epoch.
fn parse_boot_time(stat: &str) -> Option<u64> {
    stat.lines()
        .find_map(|l| l.strip_prefix("btime "))?
        .trim()
        .parse()
        .ok()
}

/// A limit as the Go client reports it: unlimited is the largest 64-bit value.
fn limit(resource: Resource) -> f64 {
    getrlimit(resource).current.unwrap_or(u64::MAX) as f64
}

fn gauge(encoder: &mut DescriptorEncoder, name: &str, help: &str, v: f64) -> fmt::Result {
    let metric = ConstGauge::new(v);
    metric.encode(encoder.encode_descriptor(name, help, None, metric.metric_type())?)
}

impl Collector for ProcessCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> fmt::Result {
        let ticks = rustix::param::clock_ticks_per_second() as f64;
        let stat = std::fs::read_to_string("/proc/self/stat")
            .ok()
            .as_deref()
            .and_then(parse_stat);
        if let Some(stat) = stat {
            let cpu = ConstCounter::new(stat.cpu_ticks as f64 / ticks);
            cpu.encode(encoder.encode_descriptor(
                "process_cpu_seconds",
                "Total user and system CPU time spent in seconds.",
                None,
                cpu.metric_type(),
            )?)?;
        }
        if let Ok(fds) = std::fs::read_dir("/proc/self/fd") {
            let open = fds.count() as f64;
            gauge(
                &mut encoder,
                "process_open_fds",
                "Number of open file descriptors.",
                open,
            )?;
        }
        gauge(
            &mut encoder,
            "process_max_fds",
            "Maximum number of open file descriptors.",
            limit(Resource::Nofile),
        )?;
        if let Some(stat) = stat {
            gauge(
                &mut encoder,
                "process_virtual_memory_bytes",
                "Virtual memory size in bytes.",
                stat.vsize as f64,
            )?;
        }
        gauge(
            &mut encoder,
            "process_virtual_memory_max_bytes",
            "Maximum amount of virtual memory available in bytes.",
            limit(Resource::As),
        )?;
        if let Some(stat) = stat {
            let page = rustix::param::page_size() as f64;
            gauge(
                &mut encoder,
                "process_resident_memory_bytes",
                "Resident memory size in bytes.",
                stat.rss_pages as f64 * page,
            )?;
            let boot = std::fs::read_to_string("/proc/stat")
                .ok()
                .as_deref()
                .and_then(parse_boot_time);
            if let Some(boot) = boot {
                gauge(
                    &mut encoder,
                    "process_start_time_seconds",
                    "Start time of the process since unix epoch in seconds.",
                    boot as f64 + stat.start_ticks as f64 / ticks,
                )?;
            }
        }
        // Go's goroutines are its units of concurrent work; gantry's are the tasks of its
        // async runtime. Outside one (a test's render) there is nothing to count.
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            gauge(
                &mut encoder,
                "go_goroutines",
                "Number of goroutines that currently exist. gantry is not a Go program: this is the number of tasks alive in its async runtime (watches, bindings, event writers, HTTP connections), its nearest equivalent; the scheduling thread and its filter and score threads are not tasks and are not counted.",
                runtime.metrics().num_alive_tasks() as f64,
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use prometheus_client::registry::Registry;

    use super::*;

    #[test]
    fn the_stat_line_is_read_past_a_name_with_spaces_and_parentheses() {
        let line = "4242 (a (b) c) S 1 4242 4242 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 9 0 12345 987654321 2048 18446744073709551615";
        assert_eq!(
            parse_stat(line),
            Some(Stat {
                cpu_ticks: 300,
                start_ticks: 12345,
                vsize: 987_654_321,
                rss_pages: 2048,
            })
        );
        assert_eq!(parse_stat("4242 (cut short) S 1"), None);
        assert_eq!(
            parse_boot_time("cpu  1 2 3\nbtime 1700000000\nprocesses 9\n"),
            Some(1_700_000_000)
        );
    }

    #[test]
    fn this_process_reports_its_own_usage() {
        let mut registry = Registry::default();
        registry.register_collector(Box::new(ProcessCollector));
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        let value = |name: &str| -> f64 {
            let line = text
                .lines()
                .find(|l| l.starts_with(&format!("{name} ")))
                .unwrap_or_else(|| panic!("no {name} in\n{text}"));
            line.rsplit(' ').next().unwrap().parse().unwrap()
        };
        assert!(
            text.contains("# TYPE process_cpu_seconds counter"),
            "{text}"
        );
        assert!(value("process_cpu_seconds_total") >= 0.0);
        assert!(value("process_open_fds") >= 3.0);
        assert!(value("process_max_fds") >= value("process_open_fds"));
        assert!(value("process_resident_memory_bytes") > 1e6);
        assert!(value("process_virtual_memory_bytes") >= value("process_resident_memory_bytes"));
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs_f64();
        let start = value("process_start_time_seconds");
        assert!(start <= now + 1.0 && start > now - 24.0 * 3600.0, "{start}");
        // Not inside an async runtime: no task to count.
        assert!(!text.contains("go_goroutines"), "{text}");
    }

    #[tokio::test]
    async fn inside_the_runtime_its_tasks_are_counted() {
        let mut registry = Registry::default();
        registry.register_collector(Box::new(ProcessCollector));
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            let _ = rx.await;
        });
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        let line = text
            .lines()
            .find(|l| l.starts_with("go_goroutines "))
            .unwrap_or_else(|| panic!("{text}"));
        let n: f64 = line.rsplit(' ').next().unwrap().parse().unwrap();
        assert!(n >= 1.0, "{line}");
        let _ = tx.send(());
        task.await.unwrap();
    }
}
