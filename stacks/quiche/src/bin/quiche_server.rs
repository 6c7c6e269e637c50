//! quiche_server: an HTTP/3-only static file server on Cloudflare's quiche (its `h3` module,
//! BoringSSL), the testbed's server "quiche" (stacks/quiche/server.yaml). It serves a
//! directory read-only (GET/HEAD of a regular file under it, 404 otherwise, nothing outside
//! it), 204 at the health path, streams files in chunks as flow control and the congestion
//! window let it (a 100 MB file never sits in memory), and writes one JSON line per request in
//! the testbed's quicbed-json access-log format (servers/accesslog.py). Its own log: stderr.
//! One thread, one UDP socket; quiche is sans-I/O, the event loop is this file's.
#![deny(warnings)]

use std::collections::HashMap;
use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::net::{SocketAddr, UdpSocket};
use std::path::{Component, Path, PathBuf};
use std::time::{Duration, Instant};

use quicbed_quiche::{library, negotiated, now, random_cid, watch_handshakes, Negotiated};
use quiche::h3::NameValue;
use serde_json::json;

// Shared with the other Rust stack (stacks/rust-common/README.md); each program uses part of it.
#[allow(dead_code)]
#[path = "../../../rust-common/wire.rs"]
mod wire;
use wire::{byte_range, iso8601, percent_decode};

const MAX_DATAGRAM: usize = 1350; // quiche's examples' payload size
const CHUNK: usize = 64 * 1024; // read from a file this much at a time
const HEALTH: &str = "/.quicbed-health";
// A paced packet due within this is sent now: the socket's wait is not finer than that.
const PACING_SLACK: Duration = Duration::from_millis(1);

struct Args {
    listen: String,
    root: PathBuf,
    cert: String,
    key: String,
    access_log: String,
    cc: String,
}

fn usage(msg: &str) -> ! {
    eprintln!(
        "usage: quiche_server [--config FILE] [--listen ADDR:PORT] [--root DIR] [--cert PEM] [--key PEM] [--access-log FILE] \
         [--cc reno|cubic|bbr] ({msg})"
    );
    std::process::exit(2);
}

fn parse() -> Args {
    let mut a = Args {
        listen: "0.0.0.0:443".into(),
        root: PathBuf::from("/srv/content"),
        cert: "/etc/quicbed/pki/server.pem".into(),
        key: "/etc/quicbed/pki/server.key".into(),
        access_log: "/var/log/quicbed/access.log".into(),
        cc: "cubic".into(),
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        if flag == "--version" {
            println!("quiche_server 0.1.0 ({})", library());
            std::process::exit(0);
        }
        let value = it
            .next()
            .unwrap_or_else(|| usage(&format!("{flag} needs a value")));
        if flag == "--config" {
            // "name value" lines (# comments), each as its --name flag; later flags override.
            let text =
                std::fs::read_to_string(&value).unwrap_or_else(|e| fail(&format!("{value}: {e}")));
            for (n, line) in text.lines().enumerate() {
                let line = line.split('#').next().unwrap_or("").trim();
                if line.is_empty() {
                    continue;
                }
                let (name, v) = line.split_once(char::is_whitespace).unwrap_or((line, ""));
                if !set(&mut a, name, v.trim().to_string()) {
                    fail(&format!("{value}:{}: unknown setting {name}", n + 1));
                }
            }
        } else if !flag
            .strip_prefix("--")
            .is_some_and(|name| set(&mut a, name, value))
        {
            usage(&format!("unknown flag {flag}"));
        }
    }
    a
}

fn set(a: &mut Args, name: &str, value: String) -> bool {
    match name {
        "listen" => a.listen = value,
        "root" => a.root = PathBuf::from(value),
        "cert" => a.cert = value,
        "key" => a.key = value,
        "access-log" => a.access_log = value,
        "cc" => a.cc = value,
        _ => return false,
    }
    true
}

/// A response in progress on one request stream.
struct Response {
    method: String,
    path: String,
    status: u16,
    file: Option<File>,
    headers: Option<Vec<quiche::h3::Header>>, // not yet sent (the stream had no room)
    pending: Vec<u8>,                         // read from the file, not yet taken by quiche
    pending_at: usize,
    left: u64, // file bytes not yet read
    sent: u64, // body bytes quiche took
    started: Instant,
    ts: String,
}

struct Client {
    conn: quiche::Connection,
    h3: Option<quiche::h3::Connection>,
    responses: HashMap<u64, Response>,
    ids: Vec<Vec<u8>>, // the connection IDs that route to it
    serial: u64,
    tls: Negotiated,
    from: SocketAddr,
    held: Option<(Vec<u8>, SocketAddr, Instant)>, // a packet its pacer says is not due yet
}

fn main() {
    let args = parse();
    watch_handshakes();
    let mut log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&args.access_log)
        .unwrap_or_else(|e| fail(&format!("access log {}: {e}", args.access_log)));
    let mut config =
        quiche::Config::new(quiche::PROTOCOL_VERSION).unwrap_or_else(|e| fail(&e.to_string()));
    config
        .load_cert_chain_from_pem_file(&args.cert)
        .unwrap_or_else(|e| fail(&format!("{}: {e}", args.cert)));
    config
        .load_priv_key_from_pem_file(&args.key)
        .unwrap_or_else(|e| fail(&format!("{}: {e}", args.key)));
    config
        .set_application_protos(quiche::h3::APPLICATION_PROTOCOL)
        .unwrap_or_else(|e| fail(&e.to_string()));
    config
        .set_cc_algorithm_name(&args.cc)
        .unwrap_or_else(|e| fail(&format!("--cc {}: {e}", args.cc)));
    config.set_max_idle_timeout(30_000);
    config.set_max_recv_udp_payload_size(MAX_DATAGRAM);
    config.set_max_send_udp_payload_size(MAX_DATAGRAM);
    config.set_initial_max_data(32 << 20);
    config.set_initial_max_stream_data_bidi_local(1 << 20);
    config.set_initial_max_stream_data_bidi_remote(1 << 20);
    config.set_initial_max_stream_data_uni(1 << 20);
    config.set_initial_max_streams_bidi(128);
    config.set_initial_max_streams_uni(16);
    config.set_disable_active_migration(true);
    config.enable_early_data();
    let h3_config = quiche::h3::Config::new().unwrap_or_else(|e| fail(&e.to_string()));
    let root = args
        .root
        .canonicalize()
        .unwrap_or_else(|e| fail(&format!("{}: {e}", args.root.display())));

    let sock = UdpSocket::bind(&args.listen)
        .unwrap_or_else(|e| fail(&format!("bind {}: {e}", args.listen)));
    let local = sock.local_addr().unwrap_or_else(|e| fail(&e.to_string()));
    eprintln!(
        "quiche_server: {} on {local} (udp), serving {}, cc {}",
        library(),
        root.display(),
        args.cc
    );

    let mut clients: HashMap<u64, Client> = HashMap::new();
    let mut routes: HashMap<Vec<u8>, u64> = HashMap::new();
    let mut next_serial = 1u64;
    let mut buf = vec![0u8; 65535];
    let mut out = [0u8; MAX_DATAGRAM];
    loop {
        // Wait for a packet or the earliest connection timer.
        let now_i = Instant::now();
        let wait = clients
            .values()
            .filter_map(|c| {
                let held = c
                    .held
                    .as_ref()
                    .map(|h| h.2.saturating_duration_since(now_i));
                match (c.conn.timeout(), held) {
                    (Some(t), Some(h)) => Some(t.min(h)),
                    (t, h) => t.or(h),
                }
            })
            .min()
            .unwrap_or(Duration::from_secs(1))
            .max(Duration::from_micros(50));
        let _ = sock.set_read_timeout(Some(wait));
        let mut first = true;
        loop {
            let got = sock.recv_from(&mut buf);
            let (len, from) = match got {
                Ok(v) => v,
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                    ) =>
                {
                    break
                }
                Err(e) => {
                    eprintln!("quiche_server: recv: {e}");
                    break;
                }
            };
            if first {
                let _ = sock.set_nonblocking(true); // then drain what is queued
                first = false;
            }
            let pkt = &mut buf[..len];
            let hdr = match quiche::Header::from_slice(pkt, quiche::MAX_CONN_ID_LEN) {
                Ok(h) => h,
                Err(_) => continue,
            };
            let serial = match routes.get(hdr.dcid.as_ref()) {
                Some(s) => *s,
                None => {
                    if hdr.ty != quiche::Type::Initial {
                        continue;
                    }
                    if !quiche::version_is_supported(hdr.version) {
                        if let Ok(n) = quiche::negotiate_version(&hdr.scid, &hdr.dcid, &mut out) {
                            let _ = sock.send_to(&out[..n], from);
                        }
                        continue;
                    }
                    // No Retry: an address check would cost the handshake a round trip,
                    // and the emulated path has no spoofers.
                    let scid = random_cid();
                    let scid = quiche::ConnectionId::from_ref(&scid);
                    let conn = match quiche::accept(&scid, None, local, from, &mut config) {
                        Ok(c) => c,
                        Err(e) => {
                            eprintln!("quiche_server: accept from {from}: {e}");
                            continue;
                        }
                    };
                    let serial = next_serial;
                    next_serial += 1;
                    let ids = vec![hdr.dcid.to_vec(), scid.to_vec()];
                    for id in &ids {
                        routes.insert(id.clone(), serial);
                    }
                    clients.insert(
                        serial,
                        Client {
                            conn,
                            h3: None,
                            responses: HashMap::new(),
                            ids,
                            serial,
                            tls: Negotiated::default(),
                            from,
                            held: None,
                        },
                    );
                    serial
                }
            };
            if let Some(c) = clients.get_mut(&serial) {
                let _ = c.conn.recv(pkt, quiche::RecvInfo { from, to: local });
            }
        }
        let _ = sock.set_nonblocking(false);

        for c in clients.values_mut() {
            if c.conn
                .timeout_instant()
                .is_some_and(|t| t <= Instant::now())
            {
                c.conn.on_timeout();
            }
            serve(c, &h3_config, &root, &mut log);
            // Pacing: quiche stamps each packet with its release time (SendInfo::at, from
            // its pacer); one that is not due yet waits here, and so does the connection.
            if let Some((pkt, to, at)) = c.held.take() {
                if at > Instant::now() + PACING_SLACK {
                    c.held = Some((pkt, to, at));
                    continue;
                }
                let _ = sock.send_to(&pkt, to);
            }
            loop {
                match c.conn.send(&mut out) {
                    Ok((n, info)) => {
                        if info.at > Instant::now() + PACING_SLACK {
                            c.held = Some((out[..n].to_vec(), info.to, info.at));
                            break;
                        }
                        if let Err(e) = sock.send_to(&out[..n], info.to) {
                            if e.kind() != io::ErrorKind::WouldBlock {
                                eprintln!("quiche_server: send to {}: {e}", info.to);
                            }
                            break;
                        }
                    }
                    Err(quiche::Error::Done) => break,
                    Err(e) => {
                        eprintln!("quiche_server: {}: send: {e}", c.conn.trace_id());
                        let _ = c.conn.close(false, 0x1, b"");
                        break;
                    }
                }
            }
        }
        // Timers that fired while we served.
        for c in clients.values_mut() {
            if c.conn
                .timeout_instant()
                .is_some_and(|t| t <= Instant::now())
            {
                c.conn.on_timeout();
            }
        }
        let closed: Vec<u64> = clients
            .iter()
            .filter(|(_, c)| c.conn.is_closed())
            .map(|(s, _)| *s)
            .collect();
        for serial in closed {
            if let Some(c) = clients.remove(&serial) {
                for id in &c.ids {
                    routes.remove(id);
                }
                if let Some(err) = c
                    .conn
                    .local_error()
                    .filter(|e| e.error_code != 0 || e.is_app && e.error_code != 0x100)
                {
                    eprintln!("quiche_server: {} closed: {:?}", c.conn.trace_id(), err);
                }
            }
        }
    }
}

fn fail(msg: &str) -> ! {
    eprintln!("quiche_server: {msg}");
    std::process::exit(1);
}

/// New requests, and the body chunks the streams have room for.
fn serve(c: &mut Client, h3_config: &quiche::h3::Config, root: &Path, log: &mut File) {
    if c.h3.is_none() && (c.conn.is_established() || c.conn.is_in_early_data()) {
        match quiche::h3::Connection::with_transport(&mut c.conn, h3_config) {
            Ok(h) => c.h3 = Some(h),
            Err(e) => {
                eprintln!("quiche_server: {}: HTTP/3: {e}", c.conn.trace_id());
                let _ = c.conn.close(false, 0x1, b"h3");
                return;
            }
        }
    }
    if c.conn.is_established() && c.tls.cipher.is_empty() {
        c.tls = negotiated(c.conn.trace_id());
    }
    let Some(h3) = c.h3.as_mut() else { return };
    loop {
        match h3.poll(&mut c.conn) {
            Ok((id, quiche::h3::Event::Headers { list, .. })) => {
                let header = |name: &[u8]| {
                    list.iter()
                        .find(|h| h.name() == name)
                        .map(|h| String::from_utf8_lossy(h.value()).to_string())
                        .unwrap_or_default()
                };
                let range = list.iter().any(|h| h.name() == b"range").then(|| header(b"range"));
                let response = respond(
                    &header(b":method"),
                    &header(b":path"),
                    range.as_deref(),
                    root,
                );
                c.responses.insert(id, response);
            }
            Ok((id, quiche::h3::Event::Data)) => {
                // A request body is not expected: read and drop it.
                let mut sink = [0u8; 4096];
                while h3.recv_body(&mut c.conn, id, &mut sink).is_ok() {}
            }
            Ok((id, quiche::h3::Event::Reset(_))) => {
                c.responses.remove(&id);
            }
            Ok(_) => {}
            Err(quiche::h3::Error::Done) => break,
            Err(e) => {
                eprintln!("quiche_server: {}: HTTP/3: {e}", c.conn.trace_id());
                break;
            }
        }
    }
    let ids: Vec<u64> = c.responses.keys().copied().collect();
    let mut done = Vec::new();
    for id in ids {
        if let Some(r) = c.responses.get_mut(&id) {
            if push(&mut c.conn, h3, id, r) {
                done.push(id);
            }
        }
    }
    for id in done {
        if let Some(r) = c.responses.remove(&id) {
            access(log, c, &r);
        }
    }
}

/// The response a request gets: its status, headers, and the file (or the part of it a GET's
/// `Range` asks for) to stream.
fn respond(method: &str, raw_path: &str, range: Option<&str>, root: &Path) -> Response {
    let path = raw_path.split(['?', '#']).next().unwrap_or("").to_string();
    let mut r = Response {
        method: method.to_string(),
        path: path.clone(),
        status: 404,
        file: None,
        headers: None,
        pending: Vec::new(),
        pending_at: 0,
        left: 0,
        sent: 0,
        started: Instant::now(),
        ts: iso_now(),
    };
    let mut length = 0u64;
    let mut content_range = None;
    if method != "GET" && method != "HEAD" {
        r.status = 405;
    } else if path == HEALTH {
        r.status = 204;
    } else if let Some((mut file, total)) = open_under(root, &path) {
        length = total;
        r.status = 200;
        if method == "GET" {
            // HEAD ignores a Range: its answer is the whole file's.
            let mut first = 0;
            match range.and_then(|v| byte_range(v, total)) {
                Some(Ok((a, b))) => {
                    r.status = 206;
                    (first, length) = (a, b - a + 1);
                    content_range = Some(format!("bytes {a}-{b}/{total}"));
                }
                Some(Err(())) => {
                    r.status = 416;
                    length = 0;
                    content_range = Some(format!("bytes */{total}"));
                }
                None => {}
            }
            if r.status != 416 {
                match file.seek(SeekFrom::Start(first)) {
                    Ok(_) => {
                        r.file = Some(file);
                        r.left = length;
                    }
                    Err(e) => {
                        eprintln!("quiche_server: {path}: {e}");
                        r.status = 500;
                    }
                }
            }
        }
    }
    let mut headers = vec![
        quiche::h3::Header::new(b":status", r.status.to_string().as_bytes()),
        quiche::h3::Header::new(b"server", b"quiche_server"),
    ];
    if let Some(cr) = &content_range {
        headers.push(quiche::h3::Header::new(b"content-range", cr.as_bytes()));
    }
    if r.status == 200 || r.status == 206 {
        headers.push(quiche::h3::Header::new(
            b"content-length",
            length.to_string().as_bytes(),
        ));
        headers.push(quiche::h3::Header::new(
            b"content-type",
            content_type(&path).as_bytes(),
        ));
        headers.push(quiche::h3::Header::new(b"accept-ranges", b"bytes"));
    } else if r.status != 204 {
        headers.push(quiche::h3::Header::new(b"content-length", b"0"));
    }
    r.headers = Some(headers);
    r
}

/// A regular file under root named by a URL path, and its size; None for anything else
/// (missing, a directory, a "..", a symlink leading out of root).
fn open_under(root: &Path, path: &str) -> Option<(File, u64)> {
    let decoded = String::from_utf8(percent_decode(path.strip_prefix('/')?)?)
        .ok()
        .filter(|s| !s.contains('\0'))?;
    let rel = Path::new(&decoded);
    if rel.components().any(|c| !matches!(c, Component::Normal(_))) {
        return None;
    }
    let full = root.join(rel).canonicalize().ok()?;
    if !full.starts_with(root) {
        return None;
    }
    let file = File::open(&full).ok()?;
    let meta = file.metadata().ok()?;
    meta.is_file().then_some((file, meta.len()))
}

fn content_type(path: &str) -> &'static str {
    match path.rsplit('.').next().unwrap_or("") {
        "html" => "text/html",
        "css" => "text/css",
        "js" => "application/javascript",
        "json" => "application/json",
        "png" => "image/png",
        "jpg" | "jpeg" => "image/jpeg",
        "svg" => "image/svg+xml",
        "mpd" => "application/dash+xml",
        "mp4" | "m4s" => "video/mp4",
        _ => "application/octet-stream",
    }
}

/// Send what the stream has room for; true when the response is complete (FIN given).
fn push(
    conn: &mut quiche::Connection,
    h3: &mut quiche::h3::Connection,
    id: u64,
    r: &mut Response,
) -> bool {
    if let Some(headers) = r.headers.take() {
        let fin = r.file.is_none();
        match h3.send_response(conn, id, &headers, fin) {
            Ok(()) => {
                if fin {
                    return true;
                }
            }
            Err(quiche::h3::Error::StreamBlocked) => {
                r.headers = Some(headers);
                return false;
            }
            Err(e) => {
                eprintln!(
                    "quiche_server: {}: response on stream {id}: {e}",
                    conn.trace_id()
                );
                r.file = None;
                return true;
            }
        }
    }
    loop {
        if r.pending_at == r.pending.len() && r.left > 0 {
            let want = CHUNK.min(r.left as usize);
            r.pending.resize(want, 0);
            r.pending_at = 0;
            let Some(file) = r.file.as_mut() else {
                return true;
            };
            if let Err(e) = file.read_exact(&mut r.pending) {
                eprintln!("quiche_server: reading {}: {e}", r.path);
                let _ = conn.stream_shutdown(id, quiche::Shutdown::Write, 0x102); // H3_INTERNAL_ERROR
                return true;
            }
            r.left -= want as u64;
        }
        let fin = r.left == 0;
        let chunk = &r.pending[r.pending_at..];
        if chunk.is_empty() && !fin {
            return false;
        }
        match h3.send_body(conn, id, chunk, fin) {
            Ok(n) => {
                r.pending_at += n;
                r.sent += n as u64;
                if fin && r.pending_at == r.pending.len() {
                    return true;
                }
                if n < chunk.len() {
                    return false; // the stream or connection window is full: wait for credit
                }
            }
            Err(quiche::h3::Error::Done) => return false,
            Err(e) => {
                eprintln!(
                    "quiche_server: {}: body on stream {id}: {e}",
                    conn.trace_id()
                );
                return true;
            }
        }
    }
}

fn access(log: &mut File, c: &Client, r: &Response) {
    let remote = match c.from {
        SocketAddr::V6(v6) => v6
            .ip()
            .to_ipv4_mapped()
            .map(|v4| v4.to_string())
            .unwrap_or(v6.ip().to_string()),
        SocketAddr::V4(v4) => v4.ip().to_string(),
    };
    let line = json!({
        "ts": r.ts,
        "proto": "HTTP/3.0",
        "tls": "TLSv1.3",
        "alpn": String::from_utf8_lossy(c.conn.application_proto()),
        "cipher": c.tls.cipher,
        "reused": if c.conn.is_resumed() { "r" } else { "." },
        "method": r.method,
        "path": r.path,
        "status": r.status,
        "bytes": r.sent,
        "request_time": (r.started.elapsed().as_secs_f64() * 1e3).round() / 1e3, // s, ms resolution (nginx's)
        "remote": remote,
        "conn": c.serial.to_string(),
    });
    if writeln!(log, "{line}").is_err() {
        eprintln!("quiche_server: cannot write the access log");
    }
}

/// The request's time as nginx's $time_iso8601 (UTC).
fn iso_now() -> String {
    iso8601(now() as i64)
}
