//! What quiche_perf and quiche_server share: the clock, random connection IDs, the library's
//! name, and what the finished handshake negotiated (cipher, group), which quiche 0.28 tells
//! only in its "connection established" trace line (no public accessor).
#![deny(warnings)]

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

// What quinn_perf writes alike (the clock, CPU, --cpu sampler, the row): stacks/rust-common/.
#[path = "../../rust-common/perf.rs"]
pub mod perf;
pub use perf::{now, process_cpu_ms};

/// The quiche release this was built against (Cargo.toml pins it: `=QUICHE_VERSION`).
pub const QUICHE_VERSION: &str = "0.28.0";

/// The row's `library`: quiche and the TLS library it builds (its vendored BoringSSL).
pub fn library() -> String {
    format!("quiche/{QUICHE_VERSION} BoringSSL")
}

/// A random source connection ID (getrandom(2)).
pub fn random_cid() -> [u8; quiche::MAX_CONN_ID_LEN] {
    let mut cid = [0u8; quiche::MAX_CONN_ID_LEN];
    let mut filled = 0;
    while filled < cid.len() {
        // SAFETY: writes at most the remaining bytes of cid.
        let n =
            unsafe { libc::getrandom(cid[filled..].as_mut_ptr().cast(), cid.len() - filled, 0) };
        if n > 0 {
            filled += n as usize;
        }
    }
    cid
}

/// What a connection's handshake negotiated, as the perf tools name it.
#[derive(Clone, Debug, Default)]
pub struct Negotiated {
    pub cipher: String,
    pub group: String,
}

/// quiche traces "<trace id> connection established: proto=.. cipher=Some(AES128_GCM)
/// curve=Some(\"X25519\") ..." (src/lib.rs, at this line in 0.28.0) when a handshake completes;
/// this logger keeps only that line, parsed, per trace id. Every other record is refused by
/// its file and line before it is formatted, so the cost is a comparison per trace call.
const ESTABLISHED_FILE_SUFFIX: &str = "src/lib.rs";
const ESTABLISHED_LINE: u32 = 8011;

struct EstablishedLog {
    on: AtomicBool,
    seen: Mutex<Vec<(String, Negotiated)>>, // few at once: the connections in handshake
}

static LOG: EstablishedLog = EstablishedLog {
    on: AtomicBool::new(false),
    seen: Mutex::new(Vec::new()),
};

impl log::Log for EstablishedLog {
    fn enabled(&self, meta: &log::Metadata) -> bool {
        meta.level() == log::Level::Trace
            && meta.target() == "quiche"
            && self.on.load(Ordering::Relaxed)
    }

    fn log(&self, record: &log::Record) {
        if !self.enabled(record.metadata())
            || record.line() != Some(ESTABLISHED_LINE)
            || !record
                .file()
                .is_some_and(|f| f.ends_with(ESTABLISHED_FILE_SUFFIX))
        {
            return;
        }
        let text = record.args().to_string();
        let Some((id, rest)) = text.split_once(" connection established: ") else {
            return;
        };
        let found = Negotiated {
            cipher: cipher_name(between(rest, "cipher=Some(", ")").unwrap_or("")),
            group: group_name(between(rest, "curve=Some(\"", "\")").unwrap_or("")),
        };
        if let Ok(mut seen) = self.seen.lock() {
            seen.push((id.to_string(), found));
        }
    }

    fn flush(&self) {}
}

fn between<'a>(s: &'a str, start: &str, end: &str) -> Option<&'a str> {
    let from = s.find(start)? + start.len();
    let len = s[from..].find(end)?;
    Some(&s[from..from + len])
}

/// quiche's crypto::Algorithm (Debug) as the IANA TLS 1.3 suite.
fn cipher_name(algorithm: &str) -> String {
    match algorithm {
        "AES128_GCM" => "TLS_AES_128_GCM_SHA256",
        "AES256_GCM" => "TLS_AES_256_GCM_SHA384",
        "ChaCha20_Poly1305" => "TLS_CHACHA20_POLY1305_SHA256",
        other => other,
    }
    .to_string()
}

/// BoringSSL's group names (SSL_get_curve_name) as OpenSSL's, which the perf tools print.
fn group_name(curve: &str) -> String {
    match curve {
        "P-256" => "secp256r1",
        "P-384" => "secp384r1",
        "P-521" => "secp521r1",
        other => other,
    }
    .to_string()
}

/// Start keeping handshake outcomes (once per process).
pub fn watch_handshakes() {
    if log::set_logger(&LOG).is_ok() {
        log::set_max_level(log::LevelFilter::Trace);
    }
    LOG.on.store(true, Ordering::Relaxed);
}

/// The handshake outcome of the connection with this trace id, taken out of the table.
pub fn negotiated(trace_id: &str) -> Negotiated {
    let Ok(mut seen) = LOG.seen.lock() else {
        return Negotiated::default();
    };
    match seen.iter().position(|(id, _)| id == trace_id) {
        Some(i) => seen.swap_remove(i).1,
        None => Negotiated::default(),
    }
}

/// The connection's error as a row's category: a TLS alert (QUIC crypto error 0x100-0x1ff),
/// or another transport/application error code.
pub fn describe(err: &quiche::ConnectionError) -> (bool, String) {
    let reason = String::from_utf8_lossy(&err.reason).to_string();
    let tls = !err.is_app && (0x100..0x200).contains(&err.error_code);
    let what = if tls {
        format!(
            "TLS alert {} ({})",
            err.error_code - 0x100,
            alert_name(err.error_code - 0x100)
        )
    } else {
        format!(
            "{}error 0x{:x}",
            if err.is_app { "application " } else { "" },
            err.error_code
        )
    };
    (
        tls,
        if reason.is_empty() {
            what
        } else {
            format!("{what}: {reason}")
        },
    )
}

fn alert_name(alert: u64) -> &'static str {
    match alert {
        40 => "handshake_failure",
        42 => "bad_certificate",
        43 => "unsupported_certificate",
        44 => "certificate_revoked",
        45 => "certificate_expired",
        46 => "certificate_unknown",
        48 => "unknown_ca",
        50 => "decode_error",
        51 => "decrypt_error",
        70 => "protocol_version",
        80 => "internal_error",
        109 => "missing_extension",
        112 => "unrecognized_name",
        120 => "no_application_protocol",
        _ => "alert",
    }
}
