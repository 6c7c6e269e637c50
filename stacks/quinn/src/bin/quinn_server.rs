// quinn_server: HTTP/3 (only) on quinn + h3/h3-quinn + rustls (ring provider), serving a
// directory read-only, for the testbed's server container (servers/README.md: content at
// /srv/content, the run's certificate in /etc/quicbed/pki, UDP :443, a `quicbed-json` access
// log at /var/log/quicbed/access.log, its own log on stderr).
#![deny(warnings)]

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::net::SocketAddr;
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use quinn::crypto::rustls::QuicServerConfig;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert, StoresServerSessions};
use rustls::sign::CertifiedKey;
use rustls::CipherSuite;
use serde_json::json;

// Shared with the other Rust stack (stacks/rust-common/README.md); each program uses part of it.
#[allow(dead_code)]
#[path = "../../../rust-common/wire.rs"]
mod wire;
use wire::{byte_range, iso8601, percent_decode};

const VERSION: &str = env!("CARGO_PKG_VERSION");
const HEALTH: &str = "/.quicbed-health";
const CHUNK: usize = 256 * 1024;

fn library() -> String {
    format!(
        "quinn/{} rustls/{} h3/{}",
        env!("QUINN_VER"),
        env!("RUSTLS_VER"),
        env!("H3_VER")
    )
}

struct Opts {
    listen: u16,
    root: PathBuf,
    cert: PathBuf,
    key: PathBuf,
    access_log: PathBuf,
}

fn parse() -> Opts {
    let mut o = Opts {
        listen: 443,
        root: "/srv/content".into(),
        cert: "/etc/quicbed/pki/server.pem".into(),
        key: "/etc/quicbed/pki/server.key".into(),
        access_log: "/var/log/quicbed/access.log".into(),
    };
    fn usage(m: &str) -> ! {
        eprintln!("usage: quinn_server [--config FILE] [--port N] [--root DIR] [--cert PEM] [--key PEM] [--access-log FILE] | --version ({m})");
        std::process::exit(2)
    }
    fn set(o: &mut Opts, k: &str, v: String) {
        match k {
            "port" => o.listen = v.parse().unwrap_or_else(|_| usage("port: not a port")),
            "root" => o.root = v.into(),
            "cert" => o.cert = v.into(),
            "key" => o.key = v.into(),
            "access-log" | "access_log" => o.access_log = v.into(),
            _ => usage(&format!("unknown setting {k}")),
        }
    }
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        if a == "--version" {
            println!("quinn_server {VERSION} ({})", library());
            std::process::exit(0);
        }
        let v = it
            .next()
            .unwrap_or_else(|| usage(&format!("{a} needs a value")));
        if a == "--config" {
            // "key = value" lines (# comments): the same settings as the flags.
            let text = std::fs::read_to_string(&v).unwrap_or_else(|e| usage(&format!("{v}: {e}")));
            for line in text
                .lines()
                .map(str::trim)
                .filter(|l| !l.is_empty() && !l.starts_with('#'))
            {
                let (k, val) = line
                    .split_once('=')
                    .unwrap_or_else(|| usage(&format!("{v}: not key = value: {line}")));
                set(&mut o, k.trim(), val.trim().to_string());
            }
            continue;
        }
        match a.strip_prefix("--") {
            Some(k) => set(&mut o, k, v),
            None => usage(&format!("unknown argument {a}")),
        }
    }
    o
}

fn cipher_name(s: CipherSuite) -> &'static str {
    match s {
        CipherSuite::TLS13_AES_128_GCM_SHA256 => "TLS_AES_128_GCM_SHA256",
        CipherSuite::TLS13_AES_256_GCM_SHA384 => "TLS_AES_256_GCM_SHA384",
        CipherSuite::TLS13_CHACHA20_POLY1305_SHA256 => "TLS_CHACHA20_POLY1305_SHA256",
        _ => "",
    }
}

/// What one connection's handshake chose. quinn hides its rustls connection, so every
/// connection gets its own rustls config whose certificate resolver notes the cipher suites the
/// client offered (rustls then picks the first of the provider's order the client offered:
/// `ignore_client_order`) and whose session store notes a resumption.
#[derive(Debug, Default)]
struct Seen {
    offered: Mutex<Vec<CipherSuite>>,
    resumed: AtomicBool,
}

#[derive(Debug)]
struct Resolver {
    key: Arc<CertifiedKey>,
    seen: Arc<Seen>,
}

impl ResolvesServerCert for Resolver {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        *self.seen.offered.lock().unwrap() = hello.cipher_suites().to_vec();
        Some(self.key.clone())
    }
}

#[derive(Debug)]
struct Sessions {
    inner: Arc<dyn StoresServerSessions>,
    seen: Arc<Seen>,
}

impl StoresServerSessions for Sessions {
    fn put(&self, key: Vec<u8>, value: Vec<u8>) -> bool {
        self.inner.put(key, value)
    }
    fn get(&self, key: &[u8]) -> Option<Vec<u8>> {
        let v = self.inner.get(key);
        if v.is_some() {
            self.seen.resumed.store(true, Ordering::SeqCst);
        }
        v
    }
    fn take(&self, key: &[u8]) -> Option<Vec<u8>> {
        let v = self.inner.take(key);
        if v.is_some() {
            self.seen.resumed.store(true, Ordering::SeqCst);
        }
        v
    }
    fn can_cache(&self) -> bool {
        self.inner.can_cache()
    }
}

struct Tls {
    provider: Arc<CryptoProvider>,
    key: Arc<CertifiedKey>,
    sessions: Arc<dyn StoresServerSessions>,
    transport: Arc<quinn::TransportConfig>,
}

impl Tls {
    fn load(o: &Opts) -> Result<Tls, String> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(&o.cert)
            .map_err(|e| format!("{}: {e}", o.cert.display()))?
            .collect::<Result<_, _>>()
            .map_err(|e| format!("{}: {e}", o.cert.display()))?;
        let key = PrivateKeyDer::from_pem_file(&o.key)
            .map_err(|e| format!("{}: {e}", o.key.display()))?;
        let key = CertifiedKey::from_der(certs, key, &provider)
            .map_err(|e| format!("certificate/key: {e}"))?;
        Ok(Tls {
            provider,
            key: Arc::new(key),
            sessions: rustls::server::ServerSessionMemoryCache::new(4096),
            transport: Arc::new(quinn::TransportConfig::default()),
        })
    }

    fn for_connection(&self, seen: &Arc<Seen>) -> Result<quinn::ServerConfig, String> {
        let mut conf = rustls::ServerConfig::builder_with_provider(self.provider.clone())
            .with_protocol_versions(&[&rustls::version::TLS13])
            .map_err(|e| e.to_string())?
            .with_no_client_auth()
            .with_cert_resolver(Arc::new(Resolver {
                key: self.key.clone(),
                seen: seen.clone(),
            }));
        conf.alpn_protocols = vec![b"h3".to_vec()];
        conf.ignore_client_order = true;
        // 0-RTT: quinn takes early data only with an unlimited early-data size.
        conf.max_early_data_size = u32::MAX;
        conf.session_storage = Arc::new(Sessions {
            inner: self.sessions.clone(),
            seen: seen.clone(),
        });
        let crypto = QuicServerConfig::try_from(conf).map_err(|e| e.to_string())?;
        let mut server = quinn::ServerConfig::with_crypto(Arc::new(crypto));
        server.transport_config(self.transport.clone());
        Ok(server)
    }

    /// The suite rustls chose: the first of the provider's order the client offered.
    fn cipher(&self, seen: &Seen) -> &'static str {
        let offered = seen.offered.lock().unwrap();
        self.provider
            .cipher_suites
            .iter()
            .map(|s| s.suite())
            .find(|s| offered.contains(s))
            .map(cipher_name)
            .unwrap_or("")
    }
}

/// RFC 3339 UTC time of a UNIX time, as nginx's $time_iso8601.
fn iso_time(t: SystemTime) -> String {
    iso8601(
        t.duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0) as i64,
    )
}

/// The file a request path names under the root, or None (404): no "..", no escape through
/// a symlink, directories serve their index.html.
fn resolve(root: &Path, path: &str) -> Option<PathBuf> {
    let decoded = String::from_utf8(percent_decode(path)?).ok()?;
    let mut p = root.to_path_buf();
    for c in Path::new(&decoded).components() {
        match c {
            Component::Normal(part) => p.push(part),
            Component::RootDir => {}
            _ => return None,
        }
    }
    if p.is_dir() {
        p.push("index.html");
    }
    let real = p.canonicalize().ok()?;
    let real_root = root.canonicalize().ok()?;
    (real.starts_with(&real_root) && real.is_file()).then_some(real)
}

fn content_type(p: &Path) -> &'static str {
    match p.extension().and_then(|e| e.to_str()).unwrap_or("") {
        "html" | "htm" => "text/html",
        "css" => "text/css",
        "js" | "mjs" => "application/javascript",
        "json" => "application/json",
        "png" => "image/png",
        "jpg" | "jpeg" => "image/jpeg",
        "gif" => "image/gif",
        "svg" => "image/svg+xml",
        "webp" => "image/webp",
        "woff2" => "font/woff2",
        "txt" => "text/plain",
        "mpd" => "application/dash+xml",
        "mp4" | "m4s" => "video/mp4",
        _ => "application/octet-stream",
    }
}

struct Log(Mutex<File>);

impl Log {
    fn write(&self, v: serde_json::Value) {
        let mut f = self.0.lock().unwrap();
        let _ = writeln!(f, "{v}");
    }
}

struct Conn {
    id: u64,
    remote: SocketAddr,
    cipher: &'static str,
    resumed: bool,
}

async fn serve_request(
    resolver: h3::server::RequestResolver<h3_quinn::Connection, Bytes>,
    root: Arc<PathBuf>,
    log: Arc<Log>,
    conn: Arc<Conn>,
) {
    let t0 = Instant::now();
    let ts = SystemTime::now();
    let Ok((req, mut stream)) = resolver.resolve_request().await else {
        return;
    };
    let method = req.method().clone();
    let path = req.uri().path().to_string();
    // A GET's Range (HEAD ignores it); the header's value if it is text.
    let range = req
        .headers()
        .get(http::header::RANGE)
        .filter(|_| method == http::Method::GET)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let mut sent: u64 = 0;
    let status = async {
        let (mut status, file) = if path == HEALTH {
            (204, None)
        } else if method != http::Method::GET && method != http::Method::HEAD {
            (405, None)
        } else {
            match resolve(&root, &path).and_then(|p| File::open(&p).ok().map(|f| (p, f))) {
                Some(pf) => (200, Some(pf)),
                None => (404, None),
            }
        };
        let mut resp = http::Response::builder().header("server", "quinn_server");
        // The file's bytes to send: from its start, this many.
        let mut body: Option<(File, u64, u64)> = None;
        if let Some((p, f)) = file {
            let total = f.metadata().map(|m| m.len()).unwrap_or(0);
            let (mut first, mut len) = (0, total);
            match range.as_deref().and_then(|v| byte_range(v, total)) {
                Some(Ok((a, b))) => {
                    status = 206;
                    (first, len) = (a, b - a + 1);
                    resp = resp.header("content-range", format!("bytes {a}-{b}/{total}"));
                }
                Some(Err(())) => {
                    status = 416;
                    len = 0;
                    resp = resp.header("content-range", format!("bytes */{total}"));
                }
                None => {}
            }
            resp = resp.header("content-length", len);
            if status != 416 {
                resp = resp
                    .header("content-type", content_type(&p))
                    .header("accept-ranges", "bytes");
                body = Some((f, first, len));
            }
        } else if status != 204 {
            resp = resp.header("content-length", 0);
        }
        stream
            .send_response(resp.status(status).body(()).expect("response"))
            .await?;
        if let (Some((mut f, first, len)), true) = (body, method == http::Method::GET) {
            // Blocking reads on the one runtime thread: the content is small and in the page
            // cache, and one thread is what nginx's one worker does too.
            let mut buf = vec![0u8; CHUNK];
            // A seek that fails sends nothing: the client sees a short body, not wrong bytes.
            let len = match f.seek(SeekFrom::Start(first)) {
                Ok(_) => len,
                Err(e) => {
                    eprintln!("quinn_server: {path}: {e}");
                    0
                }
            };
            let mut f = f.take(len);
            loop {
                let n = match f.read(&mut buf) {
                    Ok(0) => break,
                    Ok(n) => n,
                    Err(e) => {
                        eprintln!("quinn_server: {path}: {e}");
                        break;
                    }
                };
                stream.send_data(Bytes::copy_from_slice(&buf[..n])).await?;
                sent += n as u64;
                // send_data returns at once while the peer's flow-control window has room, and
                // the connection transmits only when this task yields: without this, a client
                // granting 16 MB (quiche_perf) had the whole 10 MB object copied before its
                // first byte left, 3-9 ms after the handshake flight.
                tokio::task::yield_now().await;
            }
        }
        stream.finish().await?;
        Ok::<u16, h3::error::StreamError>(status)
    }
    .await;
    let status = match status {
        Ok(s) => s,
        Err(e) => {
            eprintln!("quinn_server: {} {path}: {e}", conn.remote);
            499 // the client went away (nginx's code for it)
        }
    };
    if path == HEALTH {
        return; // the testbed leaves its probes out anyway; keep the log the trials'
    }
    log.write(json!({
        "ts": iso_time(ts),
        "proto": "HTTP/3.0",
        "tls": "TLSv1.3",
        "alpn": "h3",
        "cipher": conn.cipher,
        "reused": if conn.resumed { "r" } else { "." },
        "method": method.as_str(),
        "path": path,
        "status": status,
        "bytes": sent,
        "request_time": (t0.elapsed().as_secs_f64() * 1e3).round() / 1e3, // seconds, ms resolution as nginx
        "remote": conn.remote.ip().to_canonical().to_string(), // 1.2.3.4, not ::ffff:1.2.3.4
        "conn": conn.id.to_string(),
    }));
}

async fn serve_connection(
    incoming: quinn::Incoming,
    tls: Arc<Tls>,
    root: Arc<PathBuf>,
    log: Arc<Log>,
    id: u64,
) {
    let seen = Arc::new(Seen::default());
    let remote = incoming.remote_address();
    let config = match tls.for_connection(&seen) {
        Ok(c) => Arc::new(c),
        Err(e) => {
            eprintln!("quinn_server: TLS config: {e}");
            return;
        }
    };
    let mut connecting = match incoming.accept_with(config) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("quinn_server: {remote}: {e}");
            return;
        }
    };
    // The ClientHello is read once its handshake data is: whether it resumes is known then.
    if let Err(e) = connecting.handshake_data().await {
        eprintln!("quinn_server: {remote}: handshake: {e}");
        return;
    }
    // 0.5-RTT for a resuming client only: the connection is taken before its Finished, so its
    // 0-RTT request is answered at once. A fresh client's request comes with its Finished, and
    // taking its connection early left about one fresh loopback connection in 5-20 unanswered
    // (none in 60 without it): a fresh one waits for the handshake.
    let early = if seen.resumed.load(Ordering::SeqCst) {
        connecting.into_0rtt().map(|(conn, _)| conn)
    } else {
        Err(connecting)
    };
    let conn = match early {
        Ok(conn) => conn,
        Err(connecting) => match connecting.await {
            Ok(c) => c,
            Err(e) => {
                eprintln!("quinn_server: {remote}: handshake: {e}");
                return;
            }
        },
    };
    let c = Arc::new(Conn {
        id,
        remote,
        cipher: tls.cipher(&seen),
        resumed: seen.resumed.load(Ordering::SeqCst),
    });
    let mut h3conn = match h3::server::Connection::new(h3_quinn::Connection::new(conn)).await {
        Ok(h) => h,
        Err(e) => {
            eprintln!("quinn_server: {remote}: h3: {e}");
            return;
        }
    };
    loop {
        match h3conn.accept().await {
            Ok(Some(resolver)) => {
                tokio::spawn(serve_request(
                    resolver,
                    root.clone(),
                    log.clone(),
                    c.clone(),
                ));
            }
            Ok(None) => break,
            Err(e) => {
                if !e.is_h3_no_error() {
                    eprintln!("quinn_server: {remote}: {e}");
                }
                break;
            }
        }
    }
}

fn main() {
    let o = parse();
    let tls = match Tls::load(&o) {
        Ok(t) => Arc::new(t),
        Err(e) => {
            eprintln!("quinn_server: {e}");
            std::process::exit(1)
        }
    };
    let log = match OpenOptions::new()
        .create(true)
        .append(true)
        .open(&o.access_log)
    {
        Ok(f) => Arc::new(Log(Mutex::new(f))),
        Err(e) => {
            eprintln!("quinn_server: {}: {e}", o.access_log.display());
            std::process::exit(1)
        }
    };
    let root = Arc::new(o.root.clone());
    // One runtime thread, as nginx's one worker: the server's CPU stays one core's.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    rt.block_on(async move {
        // Every address of the container: [::] is dual-stack; 0.0.0.0 where IPv6 is off.
        let placeholder = tls
            .for_connection(&Arc::new(Seen::default()))
            .expect("TLS config");
        let endpoint =
            quinn::Endpoint::server(placeholder.clone(), SocketAddr::from(([0u16; 8], o.listen)))
                .or_else(|_| {
                    quinn::Endpoint::server(placeholder, SocketAddr::from(([0u8; 4], o.listen)))
                });
        let endpoint = match endpoint {
            Ok(e) => e,
            Err(e) => {
                eprintln!("quinn_server: UDP :{}: {e}", o.listen);
                std::process::exit(1)
            }
        };
        eprintln!(
            "quinn_server {VERSION} ({}) on UDP {}, serving {}",
            library(),
            endpoint
                .local_addr()
                .map(|a| a.to_string())
                .unwrap_or_default(),
            o.root.display()
        );
        let ids = AtomicU64::new(0);
        while let Some(incoming) = endpoint.accept().await {
            let id = ids.fetch_add(1, Ordering::Relaxed) + 1;
            tokio::spawn(serve_connection(
                incoming,
                tls.clone(),
                root.clone(),
                log.clone(),
                id,
            ));
        }
    });
}
