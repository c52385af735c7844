//! What the bench reads from the machine rather than from tgq: the disk's raw fsync rate, the
//! machine's description, a process's memory and CPU time, and a directory's size.

use std::fs::OpenOptions;
use std::io::Write as _;
use std::path::Path;
use std::process::Command;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use anyhow::Context as _;

use crate::stats::Summary;

/// The size of one record of the raw fsync probe, as a small durable write of one update.
pub const FSYNC_RECORD_BYTES: usize = 512;

/// The raw rate of small durable appends on one disk.
#[derive(Clone, Debug)]
pub struct FsyncFigures {
    /// Appends made, each followed by `fdatasync`.
    pub appends: u64,
    /// How long the probe ran.
    pub elapsed: Duration,
    /// Latency of one append + `fdatasync`.
    pub latency: Summary,
}

impl FsyncFigures {
    /// Durable appends per second.
    pub fn per_second(&self) -> f64 {
        self.appends as f64 / self.elapsed.as_secs_f64()
    }
}

/// Appends `FSYNC_RECORD_BYTES`-byte records to a new file in `dir`, `sync_data` after each, for
/// `duration`; removes the file afterwards. This is the ceiling a store without group commit would
/// have: one acknowledged write per fsync.
pub fn fsync_probe(dir: &Path, duration: Duration) -> anyhow::Result<FsyncFigures> {
    let path = dir.join("fsync-probe.log");
    let mut file = OpenOptions::new()
        .create_new(true)
        .append(true)
        .open(&path)
        .with_context(|| format!("cannot create {}", path.display()))?;
    let mut record = [b'x'; FSYNC_RECORD_BYTES];
    record[FSYNC_RECORD_BYTES - 1] = b'\n';
    let mut latencies = Vec::new();
    let start = Instant::now();
    while start.elapsed() < duration {
        let began = Instant::now();
        file.write_all(&record)?;
        file.sync_data()?;
        latencies.push(began.elapsed());
    }
    let elapsed = start.elapsed();
    drop(file);
    std::fs::remove_file(&path).with_context(|| format!("cannot remove {}", path.display()))?;
    Ok(FsyncFigures {
        appends: latencies.len() as u64,
        elapsed,
        latency: Summary::of_durations(&latencies),
    })
}

/// The machine the figures were measured on.
#[derive(Clone, Debug)]
pub struct Machine {
    /// When the run started (UTC).
    pub date: String,
    /// Logical CPUs.
    pub cpus: usize,
    /// The CPU model.
    pub cpu_model: String,
    /// The filesystem holding the data directory: device, type and size, as `df` says.
    pub disk: String,
    /// The data directory.
    pub data_dir: String,
    /// The load average when the bench started (before it built tgq).
    pub load_before: String,
    /// The load average at the end of the run.
    pub load_after: String,
}

impl Machine {
    /// Describes this machine and the disk holding `data_dir`; `load_before` is the load average
    /// when the bench started.
    pub fn describe(data_dir: &Path, load_before: String) -> Self {
        Self {
            date: command_output("date", &["-u", "+%Y-%m-%d %H:%M UTC"])
                .unwrap_or_else(|| "unknown date".into()),
            cpus: std::thread::available_parallelism().map_or(0, usize::from),
            cpu_model: cpu_model().unwrap_or_else(|| "unknown CPU".into()),
            disk: disk_of(data_dir).unwrap_or_else(|| "unknown disk".into()),
            data_dir: data_dir.display().to_string(),
            load_before,
            load_after: String::new(),
        }
    }
}

fn command_output(program: &str, args: &[&str]) -> Option<String> {
    let output = Command::new(program).args(args).output().ok()?;
    output
        .status
        .success()
        .then(|| String::from_utf8_lossy(&output.stdout).trim().to_owned())
}

fn cpu_model() -> Option<String> {
    let info = std::fs::read_to_string("/proc/cpuinfo").ok()?;
    info.lines()
        .find(|line| line.starts_with("model name"))
        .and_then(|line| line.split_once(':'))
        .map(|(_, model)| model.trim().to_owned())
}

/// `df`'s source, filesystem type and size for the filesystem holding `dir`.
fn disk_of(dir: &Path) -> Option<String> {
    let dir = dir.to_str()?;
    let table = command_output("df", &["-h", "--output=source,fstype,size", dir])?;
    let row = table.lines().nth(1)?;
    let fields: Vec<&str> = row.split_whitespace().collect();
    match fields.as_slice() {
        [source, fstype, size] => Some(format!("{source} ({fstype}, {size})")),
        _ => Some(row.trim().to_owned()),
    }
}

/// The 1, 5 and 15-minute load averages.
pub fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .map(|text| {
            text.split_whitespace()
                .take(3)
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_else(|| "unknown".into())
}

/// A process's resident memory, from `/proc/<pid>/status`.
#[derive(Clone, Copy, Debug, Default)]
pub struct Memory {
    /// The peak resident set (`VmHWM`), in KiB.
    pub peak_kib: u64,
    /// The resident set now (`VmRSS`), in KiB.
    pub now_kib: u64,
}

/// Reads `VmHWM` and `VmRSS` of a running process.
pub fn memory_of(pid: u32) -> anyhow::Result<Memory> {
    let path = format!("/proc/{pid}/status");
    let text = std::fs::read_to_string(&path).with_context(|| format!("cannot read {path}"))?;
    let field = |name: &str| -> Option<u64> {
        text.lines()
            .find_map(|line| line.strip_prefix(name))
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|kib| kib.parse().ok())
    };
    Ok(Memory {
        peak_kib: field("VmHWM:").context("no VmHWM")?,
        now_kib: field("VmRSS:").context("no VmRSS")?,
    })
}

/// User + system CPU time a process has used so far.
pub fn cpu_time_of(pid: &str) -> Option<Duration> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may hold spaces; the fields after its closing parenthesis are fixed.
    let rest = text.rsplit_once(')')?.1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the line, 12 and 13 after the name.
    let ticks: u64 = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    Some(Duration::from_secs_f64(ticks as f64 / clock_ticks()))
}

/// Kernel clock ticks per second (`getconf CLK_TCK`; 100 on Linux in practice), asked once.
fn clock_ticks() -> f64 {
    static TICKS: OnceLock<f64> = OnceLock::new();
    *TICKS.get_or_init(|| {
        command_output("getconf", &["CLK_TCK"])
            .and_then(|text| text.parse().ok())
            .unwrap_or(100.0)
    })
}

/// The total size of the files under `dir`, in bytes.
pub fn dir_size(dir: &Path) -> anyhow::Result<u64> {
    let mut total = 0;
    for entry in std::fs::read_dir(dir).with_context(|| format!("cannot list {}", dir.display()))? {
        let entry = entry?;
        let metadata = entry.metadata()?;
        total += if metadata.is_dir() {
            dir_size(&entry.path())?
        } else {
            metadata.len()
        };
    }
    Ok(total)
}
