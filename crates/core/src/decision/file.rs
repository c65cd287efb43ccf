//! The decision log file: records appended as JSON lines by a writer thread, rotated by size
//! like log rotators do (`x.jsonl` is current, `x.jsonl.1` the previous one, ...), and read
//! back, rotated files included, by `gantry explain --file`.

use std::fs::{File, OpenOptions};
use std::io::{self, BufRead, BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::mpsc::{Receiver, SyncSender, TryRecvError, TrySendError, sync_channel};
use std::thread::JoinHandle;

use super::record::DecisionRecord;

/// Default size at which the current file is rotated.
pub const DEFAULT_MAX_SIZE: u64 = 64 * 1024 * 1024;
/// Default number of rotated files kept besides the current one.
pub const DEFAULT_MAX_FILES: usize = 3;
/// Records waiting for the writer at most; beyond, [`DecisionLog::try_send`] drops.
pub const QUEUE: usize = 4096;

/// Where and how the log is written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rotation {
    /// The current file.
    pub path: PathBuf,
    /// Size in bytes beyond which the current file is rotated (a record is never split:
    /// a file holds at least one record).
    pub max_size: u64,
    /// Rotated files kept (`path.1` to `path.N`); older ones are deleted.
    pub max_files: usize,
}

/// Why the log cannot be written or read.
#[derive(Debug, thiserror::Error)]
pub enum LogError {
    /// A file cannot be opened, written, renamed or read.
    #[error("decision log {path}: {error}")]
    Io {
        /// The file.
        path: String,
        /// Why.
        error: io::Error,
    },
    /// A line is not a decision record.
    #[error("decision log {path}, line {line}: not a decision record: {error}")]
    Malformed {
        /// The file.
        path: String,
        /// The line, from 1.
        line: usize,
        /// Why.
        error: serde_json::Error,
    },
}

fn io_error(path: &Path) -> impl FnOnce(io::Error) -> LogError + '_ {
    move |error| LogError::Io {
        path: path.display().to_string(),
        error,
    }
}

/// The rotated file `n` (0 is the current one).
pub fn rotated(path: &Path, n: usize) -> PathBuf {
    if n == 0 {
        return path.to_path_buf();
    }
    let mut s = path.as_os_str().to_os_string();
    s.push(format!(".{n}"));
    PathBuf::from(s)
}

/// The writing end: a bounded queue to a writer thread, so that the scheduling thread never
/// waits on the disk.
pub struct DecisionLog {
    sender: Option<SyncSender<Arc<DecisionRecord>>>,
    thread: Option<JoinHandle<()>>,
}

impl DecisionLog {
    /// Opens (appending to) the current file and starts the writer thread. Write errors
    /// later are logged once each and the record is lost, never the scheduler.
    pub fn start(rotation: Rotation) -> Result<Self, LogError> {
        let writer = Writer::open(rotation)?;
        let (sender, receiver) = sync_channel(QUEUE);
        let thread = std::thread::Builder::new()
            .name("decision-log".to_string())
            .spawn(move || writer.run(receiver))
            .map_err(|error| LogError::Io {
                path: "<writer thread>".to_string(),
                error,
            })?;
        Ok(DecisionLog {
            sender: Some(sender),
            thread: Some(thread),
        })
    }

    /// Queues a record without waiting; false when the writer is behind (or gone) and the
    /// record is dropped from the file.
    pub fn try_send(&self, record: Arc<DecisionRecord>) -> bool {
        match &self.sender {
            Some(s) => match s.try_send(record) {
                Ok(()) => true,
                Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => false,
            },
            None => false,
        }
    }

    /// Queues a record, waiting for room: for offline runs, where every record must reach
    /// the file.
    pub fn send(&self, record: Arc<DecisionRecord>) -> bool {
        self.sender.as_ref().is_some_and(|s| s.send(record).is_ok())
    }

    /// Writes what is queued and stops the writer.
    pub fn close(mut self) {
        self.finish();
    }

    fn finish(&mut self) {
        self.sender = None;
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for DecisionLog {
    fn drop(&mut self) {
        self.finish();
    }
}

struct Writer {
    rotation: Rotation,
    file: BufWriter<File>,
    size: u64,
    line: Vec<u8>,
    last_error: Option<String>,
}

impl Writer {
    fn open(rotation: Rotation) -> Result<Self, LogError> {
        let (file, size) = open_append(&rotation.path)?;
        Ok(Writer {
            rotation,
            file: BufWriter::new(file),
            size,
            line: Vec::new(),
            last_error: None,
        })
    }

    fn run(mut self, receiver: Receiver<Arc<DecisionRecord>>) {
        loop {
            let record = match receiver.try_recv() {
                Ok(r) => r,
                Err(TryRecvError::Empty) => {
                    // Idle: what was written reaches the file before waiting.
                    let result = self.file.flush().map_err(io_error(&self.rotation.path));
                    self.report(result);
                    match receiver.recv() {
                        Ok(r) => r,
                        Err(_) => break,
                    }
                }
                Err(TryRecvError::Disconnected) => break,
            };
            let result = self.write(&record);
            self.report(result);
        }
        let result = self.file.flush().map_err(io_error(&self.rotation.path));
        self.report(result);
    }

    fn report(&mut self, result: Result<(), LogError>) {
        match result {
            Ok(()) => self.last_error = None,
            Err(e) => {
                let text = e.to_string();
                if self.last_error.as_deref() != Some(&text) {
                    tracing::warn!(error = %text, "cannot write the decision log");
                }
                self.last_error = Some(text);
            }
        }
    }

    fn write(&mut self, record: &DecisionRecord) -> Result<(), LogError> {
        self.line.clear();
        serde_json::to_writer(&mut self.line, record).map_err(|e| LogError::Io {
            path: self.rotation.path.display().to_string(),
            error: e.into(),
        })?;
        self.line.push(b'\n');
        if self.size > 0 && self.size + self.line.len() as u64 > self.rotation.max_size {
            self.rotate()?;
        }
        self.file
            .write_all(&self.line)
            .map_err(io_error(&self.rotation.path))?;
        self.size += self.line.len() as u64;
        Ok(())
    }

    /// `path.N-1` becomes `path.N` (the oldest is dropped), ..., `path` becomes `path.1`,
    /// and a new `path` is started.
    fn rotate(&mut self) -> Result<(), LogError> {
        let path = self.rotation.path.clone();
        self.file.flush().map_err(io_error(&path))?;
        let keep = self.rotation.max_files;
        if keep == 0 {
            let file = File::create(&path).map_err(io_error(&path))?;
            self.file = BufWriter::new(file);
            self.size = 0;
            return Ok(());
        }
        let oldest = rotated(&path, keep);
        match std::fs::remove_file(&oldest) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(io_error(&oldest)(e)),
        }
        for n in (0..keep).rev() {
            let from = rotated(&path, n);
            match std::fs::rename(&from, rotated(&path, n + 1)) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(io_error(&from)(e)),
            }
        }
        let (file, size) = open_append(&path)?;
        self.file = BufWriter::new(file);
        self.size = size;
        Ok(())
    }
}

fn open_append(path: &Path) -> Result<(File, u64), LogError> {
    let file = OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(io_error(path))?;
    let size = file.metadata().map_err(io_error(path))?.len();
    Ok((file, size))
}

/// Every record of the log at `path`, oldest first: the rotated files from the oldest, then
/// the current one. A last line without its newline (a record being written) is skipped;
/// any other line that is not a record is an error naming the file and line.
pub fn read_all(
    path: &Path,
    mut keep: impl FnMut(&DecisionRecord) -> bool,
) -> Result<Vec<DecisionRecord>, LogError> {
    let mut files = Vec::new();
    let mut n = 1;
    while rotated(path, n).exists() {
        files.push(rotated(path, n));
        n += 1;
    }
    files.reverse();
    files.push(path.to_path_buf());
    let mut out = Vec::new();
    for file in &files {
        let reader = BufReader::new(File::open(file).map_err(io_error(file))?);
        let mut lines = reader.split(b'\n').peekable();
        let mut number = 0;
        while let Some(line) = lines.next() {
            number += 1;
            let line = line.map_err(io_error(file))?;
            if line.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            match serde_json::from_slice::<DecisionRecord>(&line) {
                Ok(r) => {
                    if keep(&r) {
                        out.push(r);
                    }
                }
                // The writer may be in the middle of the last line.
                Err(e) if lines.peek().is_none() && e.is_eof() => {}
                Err(source) => {
                    return Err(LogError::Malformed {
                        path: file.display().to_string(),
                        line: number,
                        error: source,
                    });
                }
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decision::record::Outcome;

    fn rec(pod: &str, attempt: u32) -> Arc<DecisionRecord> {
        Arc::new(DecisionRecord {
            timestamp_ms: 0,
            namespace: "ns".to_string(),
            pod: pod.to_string(),
            profile: "default-scheduler".to_string(),
            attempt,
            result: Outcome::Unschedulable,
            node: None,
            message: Some("0/1 nodes are available: 1 Insufficient cpu.".to_string()),
            nodes_total: 1,
            nodes_evaluated: 1,
            nodes_feasible: 0,
            rejections: Vec::new(),
            score_plugins: Vec::new(),
            top_nodes: Vec::new(),
            suggestions: Vec::new(),
            preemption: None,
            group: None,
            duration_micros: 10,
        })
    }

    fn line_len() -> u64 {
        serde_json::to_vec(&*rec("p", 1)).unwrap().len() as u64 + 1
    }

    #[test]
    fn records_are_appended_and_read_back_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("d.jsonl");
        let rotation = Rotation {
            path: path.clone(),
            max_size: DEFAULT_MAX_SIZE,
            max_files: 2,
        };
        let log = DecisionLog::start(rotation.clone()).unwrap();
        for i in 1..=3 {
            assert!(log.send(rec("p", i)));
        }
        log.close();
        // A restart appends.
        let log = DecisionLog::start(rotation).unwrap();
        assert!(log.send(rec("q", 1)));
        log.close();
        let all = read_all(&path, |_| true).unwrap();
        let got: Vec<(String, u32)> = all.iter().map(|r| (r.pod.clone(), r.attempt)).collect();
        assert_eq!(
            got,
            vec![
                ("p".to_string(), 1),
                ("p".to_string(), 2),
                ("p".to_string(), 3),
                ("q".to_string(), 1)
            ]
        );
        assert_eq!(all[0], *rec("p", 1));
        let only_q = read_all(&path, |r| r.pod == "q").unwrap();
        assert_eq!(only_q.len(), 1);
    }

    #[test]
    fn files_rotate_by_size_and_the_oldest_are_deleted() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("d.jsonl");
        // Two records per file.
        let log = DecisionLog::start(Rotation {
            path: path.clone(),
            max_size: 2 * line_len(),
            max_files: 2,
        })
        .unwrap();
        for i in 1..=7 {
            assert!(log.send(rec("p", i)));
        }
        log.close();
        let lines = |p: PathBuf| std::fs::read_to_string(p).unwrap().lines().count();
        assert_eq!(lines(path.clone()), 1);
        assert_eq!(lines(rotated(&path, 1)), 2);
        assert_eq!(lines(rotated(&path, 2)), 2);
        assert!(!rotated(&path, 3).exists());
        let attempts: Vec<u32> = read_all(&path, |_| true)
            .unwrap()
            .iter()
            .map(|r| r.attempt)
            .collect();
        assert_eq!(attempts, vec![3, 4, 5, 6, 7]);
    }

    #[test]
    fn a_record_larger_than_the_limit_still_gets_a_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("d.jsonl");
        let log = DecisionLog::start(Rotation {
            path: path.clone(),
            max_size: 1,
            max_files: 0,
        })
        .unwrap();
        for i in 1..=3 {
            assert!(log.send(rec("p", i)));
        }
        log.close();
        let all = read_all(&path, |_| true).unwrap();
        assert_eq!(all.len(), 1);
        assert_eq!(all[0].attempt, 3);
        assert!(!rotated(&path, 1).exists());
    }

    #[test]
    fn a_malformed_line_is_named_and_a_partial_last_line_skipped() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("d.jsonl");
        let good = serde_json::to_string(&*rec("p", 1)).unwrap();
        std::fs::write(&path, format!("{good}\n{}", &good[..20])).unwrap();
        assert_eq!(read_all(&path, |_| true).unwrap().len(), 1);
        std::fs::write(&path, format!("{good}\nnot json\n{good}\n")).unwrap();
        let err = read_all(&path, |_| true).unwrap_err().to_string();
        assert!(
            err.starts_with(&format!(
                "decision log {}, line 2: not a decision record",
                path.display()
            )),
            "{err}"
        );
        let missing = dir.path().join("none.jsonl");
        let err = read_all(&missing, |_| true).unwrap_err().to_string();
        assert!(err.starts_with("decision log "), "{err}");
        assert!(err.contains("none.jsonl"), "{err}");
    }

    #[test]
    fn a_full_queue_drops_instead_of_waiting() {
        let (sender, _receiver) = sync_channel(1);
        let log = DecisionLog {
            sender: Some(sender),
            thread: None,
        };
        assert!(log.try_send(rec("p", 1)));
        assert!(!log.try_send(rec("p", 2)));
    }
}
