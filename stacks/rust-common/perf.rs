//! What the Rust stacks' perf clients (quiche_perf, quinn_perf) write alike, whatever their
//! QUIC library: the clock and the process's CPU, the --cpu sampler, and the rows with the perf
//! tools' keys (clients/perf/README.md, quicbed/rowschema.py). Each program fills a
//! Measurement in its own event loop; print_rows repeats it and writes the rows, so the two
//! programs' rows cannot drift apart.

use std::io::{self, Write};
use std::net::SocketAddr;
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::{json, Map, Value};

/// Seconds since the epoch, as the perf tools' `t_*` columns.
pub fn now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

/// The process's CPU (user + system) in ms, getrusage(RUSAGE_SELF).
pub fn process_cpu_ms() -> f64 {
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: ru is a valid rusage for the kernel to fill.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let tv = |t: libc::timeval| t.tv_sec as f64 * 1e3 + t.tv_usec as f64 / 1e3;
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

/// One measurement as its program saw it; 0.0 is a time not reached.
#[derive(Default)]
pub struct Measurement {
    pub t_start: f64,
    pub t_handshake: f64,
    pub t_first_byte: f64,
    pub t_done: f64,
    pub cpu_ms: Option<f64>,
    pub local: Option<SocketAddr>,
    pub status: u16,
    pub bytes: u64,
    pub cipher: String,
    pub group: String,
    pub alpn: String,
    pub resumed: bool,
    pub digest: String,
    pub early_bytes: Option<u64>, // --resume: bytes of the 0-RTT packets the server accepted
    pub err: String,
}

/// The tool, and what its command line asked for that the rows follow.
pub struct Asked<'a> {
    pub tool: &'a str, // the row's tool and backend: the client's name in the testbed
    pub tool_version: &'a str,
    pub library: &'a str,
    pub url: &'a str,
    pub sha: bool,
    pub cc: Option<&'a str>,
    pub resume: bool,
    pub n: u32,
    pub pause_ms: f64,
    pub cpu: bool,
}

/// The measurements, -n of them --pause ms apart, each with its --cpu samples, one row each on
/// stdout as soon as it is made. Whether any failed (the exit status 1).
pub fn print_rows(
    a: &Asked,
    remote: Option<SocketAddr>,
    mut measure: impl FnMut() -> Measurement,
) -> bool {
    let mut failed = false;
    let stdout = io::stdout();
    for rep in 0..a.n {
        if rep > 0 && a.pause_ms > 0.0 {
            thread::sleep(Duration::from_secs_f64(a.pause_ms / 1e3));
        }
        let sampler = a.cpu.then(Sampler::start);
        let m = measure();
        let samples = sampler.map(Sampler::finish).unwrap_or_default();
        failed |= !m.err.is_empty();
        let r = row(a, remote, &m, rep, samples);
        let mut out = stdout.lock();
        let _ = writeln!(out, "{r}");
        let _ = out.flush();
    }
    failed
}

/// The row of one measurement. Keys go in in this order; a crate whose serde_json keeps
/// insertion order (quiche's: a dependency turns on preserve_order) prints them so, another
/// sorts them.
fn row(a: &Asked, remote: Option<SocketAddr>, m: &Measurement, rep: u32, cpu: Vec<Value>) -> Value {
    // ms from t_start, cut (not rounded) to µs; every time here is at or after t_start.
    let ms = |x: f64| -> Value {
        if x == 0.0 || m.t_start == 0.0 {
            Value::Null
        } else {
            json!(((x - m.t_start) * 1e6).trunc() / 1e3)
        }
    };
    let abs = |x: f64| if x == 0.0 { Value::Null } else { json!(x) };
    let ok = m.err.is_empty();
    let mut r = Map::new();
    let mut put = |k: &str, v: Value| {
        r.insert(k.to_string(), v);
    };
    put("tool", json!(a.tool));
    put("tool_version", json!(a.tool_version));
    put("library", json!(a.library));
    put("backend", json!(a.tool));
    put("protocol", json!("quic"));
    put(
        "tls_version",
        json!(if m.t_handshake != 0.0 { "TLSv1.3" } else { "" }),
    );
    put("http_version", json!(if m.alpn == "h3" { "3" } else { "" }));
    put("cipher", json!(m.cipher));
    put("tls_group", json!(m.group));
    put(
        "local_ip",
        json!(m.local.map(|s| s.ip().to_string()).unwrap_or_default()),
    );
    put("local_port", json!(m.local.map(|s| s.port()).unwrap_or(0)));
    put(
        "remote_ip",
        json!(remote.map(|s| s.ip().to_string()).unwrap_or_default()),
    );
    put("remote_port", json!(remote.map(|s| s.port()).unwrap_or(0)));
    put("url", json!(a.url));
    put("bytes", json!(m.bytes));
    put("http_status", json!(m.status));
    put("t_start", abs(m.t_start));
    put("t_connect", abs(m.t_handshake));
    put("t_handshake", abs(m.t_handshake));
    put("t_first_byte", abs(m.t_first_byte));
    put("connection_time_ms", ms(m.t_handshake));
    put(
        "client_cpu_ms",
        m.cpu_ms
            .map(|c| json!((c * 1e3).trunc() / 1e3))
            .unwrap_or(Value::Null),
    );
    put("ttfb_ms", ms(m.t_first_byte));
    if ok && m.t_done != 0.0 {
        put("t_done", json!(m.t_done));
        put("download_time_ms", ms(m.t_done));
        put(
            "throughput_mbps",
            json!(m.bytes as f64 * 8.0 / (m.t_done - m.t_start) / 1e6),
        );
    } else {
        put("t_done", Value::Null);
        put("download_time_ms", Value::Null);
        put("throughput_mbps", Value::Null);
    }
    put("resumed", json!(m.resumed));
    put("cpu", Value::Array(cpu));
    put("rep", json!(rep));
    put("error", json!(m.err));
    if a.sha {
        put("sha256", json!(if ok { m.digest.as_str() } else { "" }));
    }
    if let Some(cc) = a.cc {
        put("cc", json!(cc));
    }
    if a.resume {
        put(
            "early_data_bytes",
            m.early_bytes.map(|b| json!(b)).unwrap_or(Value::Null),
        );
    }
    Value::Object(r)
}

/// --cpu: every 500 ms the process's share of one CPU and the machine's busy share.
struct Sampler {
    stop: mpsc::Sender<()>,
    handle: thread::JoinHandle<Vec<Value>>,
}

/// (this process's jiffies, the machine's, the machine's idle ones).
fn jiffies() -> (f64, f64, f64) {
    let mut proc_ = 0.0;
    if let Ok(s) = std::fs::read_to_string("/proc/self/stat") {
        if let Some(i) = s.rfind(')') {
            let f: Vec<&str> = s[i + 1..].split_whitespace().collect();
            proc_ = f.get(11).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0)
                + f.get(12).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
        }
    }
    let (mut all, mut idle) = (0.0, 0.0);
    if let Ok(s) = std::fs::read_to_string("/proc/stat") {
        if let Some(line) = s.lines().next() {
            for (i, v) in line.split_whitespace().skip(1).enumerate() {
                let v: f64 = v.parse().unwrap_or(0.0);
                all += v;
                if i == 3 || i == 4 {
                    idle += v;
                }
            }
        }
    }
    (proc_, all, idle)
}

fn ncpu() -> f64 {
    let n = std::fs::read_to_string("/proc/stat")
        .map(|s| {
            s.lines()
                .filter(|l| l.starts_with("cpu") && !l.starts_with("cpu "))
                .count()
        })
        .unwrap_or(1);
    n.max(1) as f64
}

impl Sampler {
    fn start() -> Sampler {
        let (stop, rx) = mpsc::channel::<()>();
        let handle = thread::spawn(move || {
            let start = Instant::now();
            let (mut p0, mut a0, mut i0) = jiffies();
            let n = ncpu();
            let mut samples = Vec::new();
            while let Err(mpsc::RecvTimeoutError::Timeout) =
                rx.recv_timeout(Duration::from_millis(500))
            {
                let (p, a, i) = jiffies();
                if a > a0 {
                    samples.push(json!({
                        "t": start.elapsed().as_secs_f64(),
                        "proc_pct": 100.0 * (p - p0) / ((a - a0) / n),
                        "sys_busy_pct": 100.0 * ((a - a0) - (i - i0)) / (a - a0),
                    }));
                }
                (p0, a0, i0) = (p, a, i);
            }
            samples
        });
        Sampler { stop, handle }
    }

    fn finish(self) -> Vec<Value> {
        let _ = self.stop.send(());
        self.handle.join().unwrap_or_default()
    }
}
