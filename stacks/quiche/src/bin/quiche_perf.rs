//! quiche_perf: HTTP/3 GETs through Cloudflare's quiche (its `h3` module, BoringSSL), one JSON
//! row per measurement with the perf tools' keys (clients/perf/README.md), each on a fresh
//! QUIC connection and a fresh connected UDP socket. The event loop is this file's: quiche is
//! sans-I/O. Exit 0 all measurements succeeded, 1 a row has an error, 2 usage error, 3
//! unsupported (no rows).
#![deny(warnings)]

use std::fs::File;
use std::io::{self, Write};
use std::net::{SocketAddr, ToSocketAddrs, UdpSocket};
use std::time::{Duration, Instant};

use quicbed_quiche::perf::{print_rows, Asked, Measurement};
use quicbed_quiche::{
    describe, library, negotiated, now, process_cpu_ms, random_cid, watch_handshakes,
};
use quiche::h3::NameValue;
use sha2::{Digest, Sha256};

// Shared with the other Rust stack (stacks/rust-common/README.md); each program uses part of it.
#[allow(dead_code)]
#[path = "../../../rust-common/wire.rs"]
mod wire;
use wire::zero_rtt_bytes;

const TOOL: &str = "quiche";
const TOOL_VERSION: &str = "0.1.0";
const EXIT_UNSUPPORTED: i32 = 3;
const MAX_DATAGRAM: usize = 1350; // quiche's examples' payload size
const CONGESTION: [&str; 3] = ["reno", "cubic", "bbr"]; // quiche 0.28's set_cc_algorithm_name

#[derive(Default)]
struct Opts {
    url: String,
    resolve: Vec<String>,
    cacert: String,
    insecure: bool,
    n: u32,
    pause_ms: f64,
    timeout_s: u64,
    cpu: bool,
    keylog: String,
    qlog: String,
    output_body: String,
    discard: bool,
    sha: bool,
    resume: bool,
    curl_timers: bool,
    cc: String,
    groups: String,
}

fn usage(msg: &str) -> ! {
    eprintln!("usage: quiche_perf --url https://NAME[:PORT]/PATH [options] ({msg}; see --help)");
    std::process::exit(2);
}

const HELP: &str = "usage: quiche_perf --url URL [--resolve NAME:PORT:ADDR] [--cacert FILE | --insecure] [-n N] [--pause MS]
  [--timeout S] [--cpu] [--keylog FILE] [--output-body FILE | --discard] [--sha256] [--cc reno|cubic|bbr]
Exit status: 0 all measurements succeeded, 1 some failed, 2 usage error, 3 unsupported (no rows).";

/// The perf tools' arguments, spelled as Go's flag package takes them (-x or --x, =value or
/// the next argument), so every stack's client reads the runner's command line alike.
fn parse(args: &[String]) -> Opts {
    let mut o = Opts {
        n: 1,
        timeout_s: 30,
        ..Default::default()
    };
    let mut i = 0;
    while i < args.len() {
        let arg = &args[i];
        i += 1;
        if !arg.starts_with('-') || arg == "-" || arg == "--" {
            usage(&format!("stray argument {arg}"));
        }
        let body = arg.trim_start_matches('-');
        let (name, inline) = match body.split_once('=') {
            Some((n, v)) => (n, Some(v.to_string())),
            None => (body, None),
        };
        let boolean = |v: Option<String>| match v.as_deref() {
            None | Some("true") | Some("1") => true,
            Some("false") | Some("0") => false,
            Some(other) => usage(&format!("invalid boolean value {other:?} for -{name}")),
        };
        match name {
            "help" | "h" => {
                println!("{HELP}");
                std::process::exit(0);
            }
            "version" => {
                println!("quiche_perf {TOOL_VERSION} ({})", library());
                std::process::exit(0);
            }
            "insecure" => o.insecure = boolean(inline),
            "cpu" => o.cpu = boolean(inline),
            "discard" => o.discard = boolean(inline),
            "sha256" => o.sha = boolean(inline),
            "resume" => o.resume = boolean(inline),
            "cold" | "verbose" => {
                boolean(inline); // accepted, change nothing (as quicgo_perf's)
            }
            "curl-timers" => o.curl_timers = boolean(inline),
            _ => {
                let value = match inline {
                    Some(v) => v,
                    None if i < args.len() => {
                        i += 1;
                        args[i - 1].clone()
                    }
                    None => usage(&format!("flag needs an argument: -{name}")),
                };
                let number = |v: &str| -> f64 {
                    v.parse::<f64>()
                        .ok()
                        .filter(|x| x.is_finite())
                        .unwrap_or_else(|| usage(&format!("invalid value {v:?} for flag -{name}")))
                };
                match name {
                    "url" => o.url = value,
                    "resolve" => o.resolve.push(value),
                    "cacert" => o.cacert = value,
                    "n" | "repetitions" => {
                        o.n = value.parse().unwrap_or_else(|_| {
                            usage(&format!("invalid value {value:?} for flag -{name}"))
                        })
                    }
                    "pause" => o.pause_ms = number(&value),
                    "timeout" => {
                        o.timeout_s = value.parse().unwrap_or_else(|_| {
                            usage(&format!("invalid value {value:?} for flag -timeout"))
                        })
                    }
                    "keylog" => o.keylog = value,
                    "qlog" => o.qlog = value,
                    "output-body" => o.output_body = value,
                    "cc" => o.cc = value,
                    "groups" => o.groups = value,
                    "backend" if value != "quiche" => usage("--backend: only quiche"),
                    "http" if value != "3" => usage("--http: only 3"),
                    "tls" if value != "1.3" => usage("--tls: only 1.3"),
                    "backend" | "http" | "tls" => {}
                    _ => usage(&format!("flag provided but not defined: -{name}")),
                }
            }
        }
    }
    if o.url.is_empty() {
        usage("--url is required");
    }
    if o.n < 1 {
        usage("-n must be at least 1");
    }
    if o.timeout_s < 1 {
        usage("--timeout must be at least 1");
    }
    if o.pause_ms < 0.0 {
        usage("--pause must not be negative");
    }
    if o.insecure && !o.cacert.is_empty() {
        usage("--cacert and --insecure exclude each other");
    }
    if !o.output_body.is_empty() && o.discard {
        usage("--output-body and --discard exclude each other");
    }
    for r in &o.resolve {
        let p: Vec<&str> = r.splitn(3, ':').collect();
        if p.len() != 3 || p[0].is_empty() || p[2].is_empty() || p[1].parse::<u16>().is_err() {
            usage(&format!("--resolve {r} is not NAME:PORT:ADDR"));
        }
    }
    o
}

/// Why an asked-for option cannot be done, or None.
fn unsupported(o: &Opts) -> Option<String> {
    if !o.qlog.is_empty() {
        return Some(format!(
            "--qlog: quiche {} writes the newer qlog draft (file_schema, event_schemas; its qlog crate 0.17), \
             not the testbed's qlog 0.3 JSON-SEQ",
            quicbed_quiche::QUICHE_VERSION
        ));
    }
    if o.curl_timers {
        return Some("--curl-timers: there is no libcurl in quiche_perf".into());
    }
    if !o.groups.is_empty() {
        return Some("--groups: quiche 0.28 has no API for key-exchange groups (BoringSSL's defaults are used)".into());
    }
    if !o.cc.is_empty() && !CONGESTION.contains(&o.cc.as_str()) {
        return Some(format!(
            "--cc {}: quiche has no congestion control '{}' ({})",
            o.cc,
            o.cc,
            CONGESTION.join(", ")
        ));
    }
    None
}

struct Target {
    host: String,
    authority: String,
    path: String,
    addr: SocketAddr,
}

fn resolve_target(o: &Opts) -> Result<Target, String> {
    let bad = || format!("url: not an https://NAME[:PORT]/PATH URL: {}", o.url);
    let rest = o.url.strip_prefix("https://").ok_or_else(bad)?;
    if o.url.contains(char::is_whitespace) {
        return Err(bad());
    }
    let (authority, path) = match rest.find(['/', '?']) {
        Some(i) if rest[i..].starts_with('/') => (&rest[..i], rest[i..].to_string()),
        Some(i) => (&rest[..i], format!("/{}", &rest[i..])),
        None => (rest, "/".to_string()),
    };
    let path = path.split('#').next().unwrap_or("/").to_string();
    let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
        let (h, after) = v6.split_once(']').ok_or_else(bad)?;
        (h.to_string(), after.strip_prefix(':').unwrap_or(""))
    } else {
        match authority.rsplit_once(':') {
            Some((h, p)) => (h.to_string(), p),
            None => (authority.to_string(), ""),
        }
    };
    if host.is_empty() || authority.contains('@') {
        return Err(bad());
    }
    let port: u16 = if port.is_empty() {
        443
    } else {
        port.parse().map_err(|_| bad())?
    };
    let mut address = String::new();
    for r in &o.resolve {
        let p: Vec<&str> = r.splitn(3, ':').collect();
        if p[0] == host && p[1] == port.to_string() {
            address = p[2].trim_matches(|c| c == '[' || c == ']').to_string();
        }
    }
    let addr = if address.is_empty() {
        (host.as_str(), port)
            .to_socket_addrs()
            .ok()
            .and_then(|mut a| a.next())
            .ok_or_else(|| format!("connect: cannot resolve {host}"))?
    } else {
        let ip: std::net::IpAddr = address
            .parse()
            .map_err(|_| format!("connect: bad address {address}"))?;
        SocketAddr::new(ip, port)
    };
    Ok(Target {
        host,
        authority: authority.to_string(),
        path,
        addr,
    })
}

/// The quiche configuration every measurement shares (one per run: the CA store is loaded once).
fn config(o: &Opts) -> Result<quiche::Config, String> {
    let mut c = quiche::Config::new(quiche::PROTOCOL_VERSION).map_err(|e| format!("quic: {e}"))?;
    c.verify_peer(!o.insecure);
    if !o.cacert.is_empty() {
        // BoringSSL takes a file without a certificate silently: say so, as the other clients.
        let pem = std::fs::read_to_string(&o.cacert)
            .map_err(|e| format!("tls: CA file {}: {}", o.cacert, io_reason(&e)))?;
        if !pem.contains("-----BEGIN CERTIFICATE-----") {
            return Err(format!("tls: no certificate in CA file {}", o.cacert));
        }
        c.load_verify_locations_from_file(&o.cacert)
            .map_err(|e| format!("tls: CA file {}: {e}", o.cacert))?;
    } else if !o.insecure {
        // The system's store (ca-certificates), as libcurl's default.
        let _ = c.load_verify_locations_from_directory("/etc/ssl/certs");
    }
    c.set_application_protos(quiche::h3::APPLICATION_PROTOCOL)
        .map_err(|e| format!("quic: {e}"))?;
    c.set_max_idle_timeout(o.timeout_s * 1000);
    c.set_max_recv_udp_payload_size(MAX_DATAGRAM);
    c.set_max_send_udp_payload_size(MAX_DATAGRAM);
    // Receive windows large enough that flow control never limits a download on the
    // testbed's paths (the C tools' ngtcp2 backend: 16 MiB stream, 32 MiB connection).
    c.set_initial_max_data(32 << 20);
    c.set_initial_max_stream_data_bidi_local(16 << 20);
    c.set_initial_max_stream_data_bidi_remote(1 << 20);
    c.set_initial_max_stream_data_uni(1 << 20);
    c.set_initial_max_streams_bidi(100);
    c.set_initial_max_streams_uni(100);
    c.set_disable_active_migration(true);
    if !o.cc.is_empty() {
        c.set_cc_algorithm_name(&o.cc)
            .map_err(|e| format!("quic: --cc {}: {e}", o.cc))?;
    }
    if !o.keylog.is_empty() {
        c.log_keys();
    }
    if o.resume {
        c.enable_early_data();
    }
    Ok(c)
}

fn io_reason(e: &io::Error) -> String {
    match e.kind() {
        io::ErrorKind::NotFound => "no such file or directory".into(),
        io::ErrorKind::PermissionDenied => "permission denied".into(),
        _ => e.to_string(),
    }
}

fn is_connect_error(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::ECONNREFUSED) | Some(libc::ENETUNREACH) | Some(libc::EHOSTUNREACH)
    )
}

fn connect_error(e: &io::Error) -> String {
    match e.raw_os_error() {
        Some(libc::ECONNREFUSED) => "connect: connection refused".into(),
        Some(libc::ENETUNREACH) => "connect: network is unreachable".into(),
        Some(libc::EHOSTUNREACH) => "connect: no route to host".into(),
        _ => format!("connect: {e}"),
    }
}

fn measure(
    o: &Opts,
    t: &Target,
    cfg: &mut quiche::Config,
    keylog: Option<&File>,
    body: &mut dyn Write,
    session: &mut Option<Vec<u8>>,
) -> Measurement {
    let mut m = Measurement::default();
    let deadline_after = Duration::from_secs(o.timeout_s);
    let bind = if t.addr.is_ipv4() {
        "0.0.0.0:0"
    } else {
        "[::]:0"
    };
    let sock = match UdpSocket::bind(bind).and_then(|s| s.connect(t.addr).map(|_| s)) {
        Ok(s) => s,
        Err(e) => {
            m.err = connect_error(&e);
            return m;
        }
    };
    let local = match sock.local_addr() {
        Ok(a) => a,
        Err(e) => {
            m.err = connect_error(&e);
            return m;
        }
    };
    m.local = Some(local);
    let scid = random_cid();
    let scid = quiche::ConnectionId::from_ref(&scid);
    let mut buf = vec![0u8; 65535];
    let mut out = [0u8; MAX_DATAGRAM];
    let mut hasher = Sha256::new();

    m.t_start = now();
    let started = Instant::now();
    let cpu0 = process_cpu_ms();
    let mut conn = match quiche::connect(Some(&t.host), &scid, local, t.addr, cfg) {
        Ok(c) => c,
        Err(e) => {
            m.err = format!("quic: {e}");
            return m;
        }
    };
    if let Some(f) = keylog.and_then(|f| f.try_clone().ok()) {
        conn.set_keylog(Box::new(f));
    }
    if let Some(ticket) = session.as_deref() {
        // --resume: the previous connection's session; its request goes out as 0-RTT.
        if let Err(e) = conn.set_session(ticket) {
            m.err = format!("tls: the session does not resume: {e}");
            return m;
        }
    }
    let mut early_bytes = 0usize;
    let trace_id = conn.trace_id().to_string();
    let h3_config = match quiche::h3::Config::new() {
        Ok(c) => c,
        Err(e) => {
            m.err = format!("quic: {e}");
            return m;
        }
    };
    let mut h3: Option<quiche::h3::Connection> = None;
    let mut stream: Option<u64> = None;
    let mut finished = false;
    let mut io_err: Option<String> = None;
    let mut last_rx = 0.0;

    'run: loop {
        if m.t_handshake == 0.0 && conn.is_established() {
            m.t_handshake = last_rx;
            m.cpu_ms = Some(process_cpu_ms() - cpu0);
            m.alpn = String::from_utf8_lossy(conn.application_proto()).to_string();
            m.resumed = conn.is_resumed();
            let n = negotiated(&trace_id);
            m.cipher = n.cipher;
            m.group = n.group;
        }
        // HTTP/3 and the request once the handshake is done, or at once in 0-RTT (--resume).
        if h3.is_none() && (conn.is_established() || conn.is_in_early_data()) {
            match quiche::h3::Connection::with_transport(&mut conn, &h3_config) {
                Ok(c) => h3 = Some(c),
                Err(e) => {
                    io_err = Some(format!("quic: HTTP/3: {e}"));
                    break;
                }
            }
        }
        if let (Some(h3c), None) = (h3.as_mut(), stream) {
            let req = [
                quiche::h3::Header::new(b":method", b"GET"),
                quiche::h3::Header::new(b":scheme", b"https"),
                quiche::h3::Header::new(b":authority", t.authority.as_bytes()),
                quiche::h3::Header::new(b":path", t.path.as_bytes()),
                quiche::h3::Header::new(
                    b"user-agent",
                    format!("quiche_perf/{TOOL_VERSION}").as_bytes(),
                ),
            ];
            match h3c.send_request(&mut conn, &req, true) {
                Ok(id) => stream = Some(id),
                Err(quiche::h3::Error::StreamBlocked) => {}
                Err(e) => {
                    io_err = Some(format!("quic: HTTP/3 request: {e}"));
                    break;
                }
            }
        }
        // Send what quiche has, then wait for a packet or quiche's timer.
        loop {
            match conn.send(&mut out) {
                Ok((len, _)) => {
                    early_bytes += zero_rtt_bytes(&out[..len]);
                    if let Err(e) = sock.send(&out[..len]) {
                        if is_connect_error(&e) {
                            io_err = Some(connect_error(&e));
                            break 'run;
                        }
                        if e.kind() != io::ErrorKind::WouldBlock {
                            io_err = Some(format!("quic: send: {e}"));
                            break 'run;
                        }
                    }
                }
                Err(quiche::Error::Done) => break,
                Err(e) => {
                    io_err = Some(format!("quic: {e}"));
                    break 'run;
                }
            }
        }
        if conn.is_closed() || finished {
            break;
        }
        if h3.is_none() && conn.is_in_early_data() {
            continue; // the ClientHello is out: the 0-RTT request follows it at once
        }
        let elapsed = started.elapsed();
        if elapsed >= deadline_after {
            break;
        }
        let wait = conn
            .timeout()
            .unwrap_or(deadline_after)
            .min(deadline_after - elapsed)
            .max(Duration::from_micros(50));
        let _ = sock.set_read_timeout(Some(wait));
        match sock.recv(&mut buf) {
            Ok(len) => {
                last_rx = now();
                let info = quiche::RecvInfo {
                    from: t.addr,
                    to: local,
                };
                // A packet quiche cannot take is dropped (as a server's stray); a fatal
                // error closes the connection, which the loop sees.
                let _ = conn.recv(&mut buf[..len], info);
                // Drain whatever else is queued without waiting.
                let _ = sock.set_nonblocking(true);
                while let Ok(len) = sock.recv(&mut buf) {
                    last_rx = now();
                    let _ = conn.recv(&mut buf[..len], info);
                }
                let _ = sock.set_nonblocking(false);
            }
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                conn.on_timeout()
            }
            Err(e) if is_connect_error(&e) => {
                io_err = Some(connect_error(&e));
                break;
            }
            Err(e) => {
                io_err = Some(format!("quic: recv: {e}"));
                break;
            }
        }
        let Some(h3c) = h3.as_mut() else { continue };
        loop {
            match h3c.poll(&mut conn) {
                Ok((id, quiche::h3::Event::Headers { list, .. })) if Some(id) == stream => {
                    if m.t_first_byte == 0.0 {
                        m.t_first_byte = last_rx;
                    }
                    for h in &list {
                        if h.name() == b":status" {
                            m.status = std::str::from_utf8(h.value())
                                .ok()
                                .and_then(|s| s.parse().ok())
                                .unwrap_or(0);
                        }
                    }
                }
                Ok((id, quiche::h3::Event::Data)) if Some(id) == stream => {
                    while let Ok(n) = h3c.recv_body(&mut conn, id, &mut buf) {
                        m.bytes += n as u64;
                        hasher.update(&buf[..n]);
                        if let Err(e) = body.write_all(&buf[..n]) {
                            io_err = Some(format!("quic: writing the body: {e}"));
                            break 'run;
                        }
                    }
                }
                Ok((id, quiche::h3::Event::Finished)) if Some(id) == stream => {
                    m.t_done = last_rx;
                    finished = true;
                    let _ = conn.close(true, 0x100, b""); // H3_NO_ERROR
                }
                Ok((id, quiche::h3::Event::Reset(code))) if Some(id) == stream => {
                    io_err = Some(format!(
                        "quic: stream reset by the server (error 0x{code:x})"
                    ));
                    break 'run;
                }
                Ok(_) => {}
                Err(quiche::h3::Error::Done) => break,
                Err(e) => {
                    io_err = Some(format!("quic: HTTP/3: {e}"));
                    break 'run;
                }
            }
        }
    }
    if let (true, Some(ticket)) = (o.resume, conn.session()) {
        *session = Some(ticket.to_vec()); // the newest ticket, for the next connection
    }
    if o.resume && m.t_handshake != 0.0 {
        // BoringSSL's ssl_early_data_accepted: the server took the 0-RTT packets.
        m.early_bytes = Some(if conn.early_data_reason() == 2 {
            early_bytes as u64
        } else {
            0
        });
    }
    // Send the CONNECTION_CLOSE (ours, after the body) before the socket goes.
    while let Ok((len, _)) = conn.send(&mut out) {
        let _ = sock.send(&out[..len]);
    }
    if let Some(e) = io_err {
        m.err = e;
    } else if finished {
        m.digest = format!("{:x}", hasher.finalize());
        if m.status != 200 {
            m.err = format!("http: status {}", m.status);
        }
    } else if let Some(err) = conn.peer_error().or(conn.local_error()) {
        let (tls, what) = describe(err);
        let who = if conn.peer_error().is_some() {
            "the server closed: "
        } else {
            ""
        };
        m.err = format!("{}: {who}{what}", if tls { "tls" } else { "quic" });
    } else if m.t_handshake == 0.0 {
        m.err = "timeout: handshake not done".into();
    } else {
        m.err = "timeout: transfer not done".into();
    }
    if !m.err.is_empty() {
        m.t_done = 0.0;
    }
    m
}

fn open_out(path: &str, append: bool) -> File {
    let mut opts = std::fs::OpenOptions::new();
    opts.create(true).write(true);
    if append {
        opts.append(true)
    } else {
        opts.truncate(true)
    };
    opts.open(path).unwrap_or_else(|e| {
        eprintln!("quiche_perf: {path}: {e}");
        std::process::exit(2)
    })
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let o = parse(&args);
    if let Some(why) = unsupported(&o) {
        eprintln!("quiche_perf: unsupported: {why}");
        std::process::exit(EXIT_UNSUPPORTED);
    }
    watch_handshakes();
    let keylog = (!o.keylog.is_empty()).then(|| open_out(&o.keylog, true));
    let mut body: Box<dyn Write> = if o.output_body.is_empty() {
        Box::new(io::sink())
    } else {
        Box::new(io::BufWriter::new(open_out(&o.output_body, false)))
    };
    let target = resolve_target(&o);
    let mut setup_err = String::new();
    let mut cfg = None;
    match &target {
        Err(e) => setup_err = e.clone(),
        Ok(_) => match config(&o) {
            Ok(c) => cfg = Some(c),
            Err(e) => setup_err = e,
        },
    }
    // --resume: an unprinted warm-up connection leaves the session every measured one resumes
    // (each then leaves its own newest ticket for the next).
    let mut session: Option<Vec<u8>> = None;
    if let (true, Ok(t), Some(c)) = (o.resume, &target, cfg.as_mut()) {
        let warm = measure(&o, t, c, None, &mut io::sink(), &mut session);
        if !warm.err.is_empty() {
            setup_err = warm.err;
            cfg = None;
        } else if session.is_none() {
            setup_err = "tls: the server sent no session ticket to resume".into();
            cfg = None;
        }
    }
    let library = library();
    let asked = Asked {
        tool: TOOL,
        tool_version: TOOL_VERSION,
        library: &library,
        url: &o.url,
        sha: o.sha,
        cc: (!o.cc.is_empty()).then_some(o.cc.as_str()),
        resume: o.resume,
        n: o.n,
        pause_ms: o.pause_ms,
        cpu: o.cpu,
    };
    let remote = target.as_ref().ok().map(|t| t.addr);
    let failed = print_rows(&asked, remote, || match (&target, cfg.as_mut()) {
        (Ok(t), Some(c)) => measure(&o, t, c, keylog.as_ref(), &mut body, &mut session),
        _ => Measurement {
            err: setup_err.clone(),
            ..Default::default()
        },
    });
    let _ = body.flush();
    std::process::exit(if failed { 1 } else { 0 });
}
