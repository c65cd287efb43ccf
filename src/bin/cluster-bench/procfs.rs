//! What /proc says about a process: its memory (resident now, and the high-water mark) and
//! the CPU time it used, all threads together.

use std::collections::BTreeMap;
use std::path::PathBuf;

/// Clock ticks per second of the `utime`/`stime` fields of `/proc/PID/stat` (`USER_HZ`,
/// 100 on every Linux architecture that matters here).
const TICKS_PER_SECOND: f64 = 100.0;

/// A process to read from /proc; `None` reads this process.
#[derive(Debug, Clone, Copy)]
pub struct Proc(pub Option<u32>);

impl Proc {
    fn path(&self, file: &str) -> PathBuf {
        match self.0 {
            Some(pid) => PathBuf::from(format!("/proc/{pid}/{file}")),
            None => PathBuf::from(format!("/proc/self/{file}")),
        }
    }

    /// A `kB` field of `/proc/PID/status` (`VmRSS`, `VmHWM`), in KiB; `None` once the process
    /// is gone.
    pub fn status_kib(&self, field: &str) -> Option<u64> {
        let text = std::fs::read_to_string(self.path("status")).ok()?;
        status_field_kib(&text, field)
    }

    /// User plus system CPU time of every thread so far, in seconds.
    pub fn cpu_seconds(&self) -> Option<f64> {
        let text = std::fs::read_to_string(self.path("stat")).ok()?;
        stat_cpu_seconds(&text)
    }
}

/// CPU seconds of a process's threads, grouped by thread name with trailing digits and
/// dashes dropped (`filter-3` counts as `filter`), so that pools add up.
pub fn thread_cpu_seconds(pid: u32) -> BTreeMap<String, f64> {
    let mut groups = BTreeMap::new();
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return groups;
    };
    for task in tasks.flatten() {
        let dir = task.path();
        let (Ok(comm), Ok(stat)) = (
            std::fs::read_to_string(dir.join("comm")),
            std::fs::read_to_string(dir.join("stat")),
        ) else {
            continue;
        };
        if let Some(cpu) = stat_cpu_seconds(&stat) {
            *groups.entry(thread_group(&comm)).or_insert(0.0) += cpu;
        }
    }
    groups
}

fn thread_group(comm: &str) -> String {
    comm.trim()
        .trim_end_matches(|c: char| c.is_ascii_digit() || c == '-' || c == '_')
        .to_string()
}

/// CPU time the whole machine spent busy (every state but idle and iowait), in seconds.
pub fn machine_busy_seconds() -> Option<f64> {
    let text = std::fs::read_to_string("/proc/stat").ok()?;
    stat_busy_seconds(&text)
}

/// The 1-minute load average.
pub fn load_average() -> Option<f64> {
    let text = std::fs::read_to_string("/proc/loadavg").ok()?;
    text.split_whitespace().next()?.parse().ok()
}

fn stat_busy_seconds(stat: &str) -> Option<f64> {
    // "cpu  user nice system idle iowait irq softirq steal guest guest_nice"; guest time is
    // already counted in user and nice.
    let line = stat.lines().find(|l| l.starts_with("cpu "))?;
    let ticks: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .map(str::parse)
        .collect::<Result<_, _>>()
        .ok()?;
    let busy: u64 = ticks
        .iter()
        .take(8)
        .enumerate()
        .filter(|(i, _)| *i != 3 && *i != 4)
        .map(|(_, t)| t)
        .sum();
    Some(busy as f64 / TICKS_PER_SECOND)
}

fn status_field_kib(status: &str, field: &str) -> Option<u64> {
    status.lines().find_map(|line| {
        let rest = line.strip_prefix(field)?.strip_prefix(':')?;
        rest.split_whitespace().next()?.parse().ok()
    })
}

fn stat_cpu_seconds(stat: &str) -> Option<f64> {
    // "pid (comm) state ppid ...": comm may hold spaces and parentheses, so fields are counted
    // from the last ')'. utime and stime are fields 14 and 15, i.e. 12th and 13th after it.
    let (_, rest) = stat.rsplit_once(") ")?;
    let mut fields = rest.split_whitespace().skip(11);
    let utime: u64 = fields.next()?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    // Tick counts stay far below 2^52, where f64 is exact.
    Some((utime + stime) as f64 / TICKS_PER_SECOND)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_kib_fields_of_status() {
        let status = "Name:\tgantry\nVmPeak:\t  900 kB\nVmHWM:\t   51234 kB\nVmRSS:\t   40000 kB\n";
        assert_eq!(status_field_kib(status, "VmHWM"), Some(51234));
        assert_eq!(status_field_kib(status, "VmRSS"), Some(40000));
        assert_eq!(status_field_kib(status, "VmSwap"), None);
    }

    #[test]
    fn reads_cpu_time_after_a_command_name_with_spaces() {
        let stat = "1234 (a (b) c) S 1 1234 1234 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 9 0 77 0 0";
        assert_eq!(stat_cpu_seconds(stat), Some(3.0));
    }

    #[test]
    fn threads_are_grouped_by_name_without_their_number() {
        assert_eq!(thread_group("filter-12\n"), "filter");
        assert_eq!(thread_group("gantry-io"), "gantry-io");
        assert_eq!(thread_group("tokio-runtime-w"), "tokio-runtime-w");
        let mine = thread_cpu_seconds(std::process::id());
        assert!(!mine.is_empty());
    }

    #[test]
    fn machine_busy_time_leaves_out_idle_iowait_and_guest() {
        let stat = "cpu  100 10 50 9000 40 5 5 2 30 0\ncpu0 50 5 25 4500 20 2 3 1 15 0\n";
        assert_eq!(stat_busy_seconds(stat), Some(1.72));
    }

    #[test]
    fn this_process_is_readable() {
        let me = Proc(None);
        assert!(me.status_kib("VmRSS").is_some_and(|kib| kib > 0));
        assert!(me.cpu_seconds().is_some());
        assert!(machine_busy_seconds().is_some());
        assert!(load_average().is_some());
    }
}
