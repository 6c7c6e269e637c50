// quinn_perf: HTTP/3 GETs through quinn (QUIC), h3/h3-quinn (HTTP/3) and rustls with the ring
// provider (TLS 1.3), one JSON row per measurement with the perf tools' keys
// (clients/perf/README.md). Exit 0 all measurements succeeded, 1 a row has an error, 2 usage
// error, 3 unsupported (no rows).
#![deny(warnings)]

use std::fs::{File, OpenOptions};
use std::io::{self, IoSliceMut, Write};
use std::net::{SocketAddr, ToSocketAddrs, UdpSocket};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Buf;
use quinn::crypto::rustls::QuicClientConfig;
use quinn::{AsyncUdpSocket, ConnectionError, Runtime, TokioRuntime, UdpPoller};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{ActiveKeyExchange, CryptoProvider, SharedSecret, SupportedKxGroup};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{
    CipherSuite, DigitallySignedStruct, NamedGroup, SignatureScheme, SupportedCipherSuite,
};
use sha2::{Digest, Sha256};

// Shared with the other Rust stack (stacks/rust-common/README.md); each program uses part of it.
#[allow(dead_code)]
#[path = "../../../rust-common/wire.rs"]
mod wire;
use wire::zero_rtt_bytes;
// The clock, CPU, --cpu sampler and row quiche_perf writes alike (stacks/rust-common/).
#[path = "../../../rust-common/perf.rs"]
mod perf;
use perf::{now, print_rows, process_cpu_ms, Asked, Measurement};

const TOOL: &str = "quinn"; // the row's tool: the client's name in the testbed
const TOOL_VERSION: &str = env!("CARGO_PKG_VERSION");
const EXIT_UNSUPPORTED: i32 = 3;

fn library() -> String {
    format!(
        "quinn/{} rustls/{} h3/{}",
        env!("QUINN_VER"),
        env!("RUSTLS_VER"),
        env!("H3_VER")
    )
}

fn usage(msg: &str) -> ! {
    eprintln!("usage: quinn_perf --url https://NAME[:PORT]/PATH [options] ({msg}; see --help)");
    std::process::exit(2)
}

#[derive(Default)]
struct Opts {
    url: String,
    resolve: Vec<String>,
    cacert: Option<String>,
    keylog: Option<String>,
    qlog: Option<String>,
    output_body: Option<String>,
    cc: Option<String>,
    groups: Option<String>,
    insecure: bool,
    cpu: bool,
    discard: bool,
    sha: bool,
    resume: bool,
    curl_timers: bool,
    n: u32,
    pause_ms: f64,
    timeout_s: u64,
}

const HELP: &str = "usage: quinn_perf --url URL [--resolve NAME:PORT:ADDR] [--cacert FILE | --insecure] [-n N] [--pause MS]
  [--timeout S] [--cpu] [--keylog FILE] [--output-body FILE | --discard] [--sha256] [--groups LIST]
  [--cc reno|cubic|bbr] [--resume]
Exit status: 0 all measurements succeeded, 1 some failed, 2 usage error, 3 unsupported (no rows).";

fn number<T: std::str::FromStr>(flag: &str, v: &str) -> T {
    v.parse()
        .unwrap_or_else(|_| usage(&format!("invalid value {v:?} for flag -{flag}")))
}

/// The perf tools' arguments, as Go's flag package takes them (-x or --x, value after a space
/// or an '=').
fn parse(args: Vec<String>) -> Opts {
    let mut o = Opts {
        n: 1,
        timeout_s: 30,
        ..Default::default()
    };
    let (mut backend, mut http, mut tls) =
        ("quinn".to_string(), "3".to_string(), "1.3".to_string());
    let mut it = args.into_iter();
    while let Some(arg) = it.next() {
        let Some(stripped) = arg.strip_prefix("--").or_else(|| arg.strip_prefix('-')) else {
            usage(&format!("stray argument {arg}"));
        };
        if stripped.is_empty() {
            usage(&format!("stray argument {arg}"));
        }
        let (name, inline) = match stripped.split_once('=') {
            Some((n, v)) => (n.to_string(), Some(v.to_string())),
            None => (stripped.to_string(), None),
        };
        let flag = |b: &mut bool| *b = inline.as_deref().is_none_or(|v| v == "true" || v == "1");
        match name.as_str() {
            "insecure" => flag(&mut o.insecure),
            "cpu" => flag(&mut o.cpu),
            "discard" => flag(&mut o.discard),
            "sha256" => flag(&mut o.sha),
            "resume" => flag(&mut o.resume),
            "curl-timers" => flag(&mut o.curl_timers),
            "cold" | "verbose" => {} // accepted, change nothing (as quicgo_perf)
            "help" | "h" => {
                println!("{HELP}");
                std::process::exit(0)
            }
            "version" => {
                println!("quinn_perf {TOOL_VERSION} ({})", library());
                std::process::exit(0)
            }
            "url" | "resolve" | "cacert" | "n" | "repetitions" | "pause" | "timeout" | "keylog"
            | "qlog" | "output-body" | "cc" | "groups" | "backend" | "http" | "tls" => {
                let v = match inline {
                    Some(v) => v,
                    None => it
                        .next()
                        .unwrap_or_else(|| usage(&format!("flag needs an argument: -{name}"))),
                };
                match name.as_str() {
                    "url" => o.url = v,
                    "resolve" => o.resolve.push(v),
                    "cacert" => o.cacert = Some(v),
                    "n" | "repetitions" => {
                        o.n = number::<i64>(&name, &v).clamp(0, u32::MAX as i64) as u32
                    }
                    "pause" => o.pause_ms = number(&name, &v),
                    "timeout" => o.timeout_s = number::<i64>(&name, &v).max(0) as u64,
                    "keylog" => o.keylog = Some(v),
                    "qlog" => o.qlog = Some(v),
                    "output-body" => o.output_body = Some(v),
                    "cc" => o.cc = Some(v),
                    "groups" => o.groups = Some(v),
                    "backend" => backend = v,
                    "http" => http = v,
                    _ => tls = v,
                }
            }
            _ => usage(&format!("flag provided but not defined: -{name}")),
        }
    }
    if o.url.is_empty() {
        usage("--url is required");
    } else if o.n < 1 {
        usage("-n must be at least 1");
    } else if o.timeout_s < 1 {
        usage("--timeout must be at least 1");
    } else if o.pause_ms < 0.0 || o.pause_ms.is_nan() {
        usage("--pause must not be negative");
    } else if backend != "quinn" {
        usage("--backend: only quinn");
    } else if http != "3" {
        usage("--http: only 3");
    } else if tls != "1.3" {
        usage("--tls: only 1.3");
    } else if o.insecure && o.cacert.is_some() {
        usage("--cacert and --insecure exclude each other");
    } else if o.output_body.is_some() && o.discard {
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

// Key-exchange groups by OpenSSL's names (the C tools' --groups): what rustls's ring provider has,
// and the names OpenSSL knows that it lacks (those are exit 3, not an error row).
fn ring_group(name: &str) -> Option<&'static dyn SupportedKxGroup> {
    use rustls::crypto::ring::kx_group;
    match name {
        "X25519" => Some(kx_group::X25519),
        "secp256r1" | "P-256" | "prime256v1" => Some(kx_group::SECP256R1),
        "secp384r1" | "P-384" => Some(kx_group::SECP384R1),
        _ => None,
    }
}
const LACKING_GROUPS: &[&str] = &[
    "X25519MLKEM768",
    "SecP256r1MLKEM768",
    "SecP384r1MLKEM1024",
    "MLKEM768",
    "secp521r1",
    "X448",
    "ffdhe2048",
    "ffdhe3072",
    "ffdhe4096",
    "ffdhe6144",
    "ffdhe8192",
];

fn group_name(g: NamedGroup) -> &'static str {
    match g {
        NamedGroup::X25519 => "X25519",
        NamedGroup::secp256r1 => "secp256r1",
        NamedGroup::secp384r1 => "secp384r1",
        _ => "",
    }
}

fn cipher_name(s: CipherSuite) -> &'static str {
    match s {
        CipherSuite::TLS13_AES_128_GCM_SHA256 => "TLS_AES_128_GCM_SHA256",
        CipherSuite::TLS13_AES_256_GCM_SHA384 => "TLS_AES_256_GCM_SHA384",
        CipherSuite::TLS13_CHACHA20_POLY1305_SHA256 => "TLS_CHACHA20_POLY1305_SHA256",
        _ => "",
    }
}

fn unsupported(o: &Opts) -> Option<String> {
    if o.qlog.is_some() {
        return Some(
            "--qlog: quinn_perf writes no qlog (quinn's qlog feature is not built in)".into(),
        );
    }
    if o.curl_timers {
        return Some("--curl-timers: there is no libcurl in quinn_perf".into());
    }
    if let Some(cc) = &o.cc {
        if !["reno", "cubic", "bbr"].contains(&cc.as_str()) {
            return Some(format!(
                "--cc {cc}: quinn has no congestion control {cc:?} (reno, cubic, bbr)"
            ));
        }
    }
    if let Some(groups) = &o.groups {
        if let Some(g) = groups.split(':').find(|g| LACKING_GROUPS.contains(g)) {
            return Some(format!(
                "--groups {g}: rustls's ring provider has no such key-exchange group (X25519, secp256r1, secp384r1)"
            ));
        }
    }
    None
}

// What the handshake negotiated. quinn hides its rustls connection, so the provider's groups
// and cipher suites are wrapped to note what they are used for: the last key exchange
// completed and the last suite that made packet keys (Initial keys are AES-128-GCM, the
// handshake's keys the negotiated suite's, and they come after). One connection at a time.
static NEGOTIATED: Mutex<(&str, &str)> = Mutex::new(("", ""));
// Whether the server presented a certificate (the verifier was asked): a resumed TLS 1.3
// handshake has none, rustls then verifies nothing, and quinn hides rustls's handshake kind.
static CERT_PRESENTED: AtomicBool = AtomicBool::new(false);

#[derive(Debug)]
struct KxRecorder(&'static dyn SupportedKxGroup);

impl SupportedKxGroup for KxRecorder {
    fn start(&self) -> Result<Box<dyn ActiveKeyExchange>, rustls::Error> {
        Ok(Box::new(ActiveRecorder(self.0.start()?)))
    }
    fn name(&self) -> NamedGroup {
        self.0.name()
    }
}

struct ActiveRecorder(Box<dyn ActiveKeyExchange>);

impl ActiveKeyExchange for ActiveRecorder {
    fn complete(self: Box<Self>, peer_pub_key: &[u8]) -> Result<SharedSecret, rustls::Error> {
        let group = self.0.group();
        let out = self.0.complete(peer_pub_key);
        if out.is_ok() {
            NEGOTIATED.lock().unwrap().1 = group_name(group);
        }
        out
    }
    fn pub_key(&self) -> &[u8] {
        self.0.pub_key()
    }
    fn group(&self) -> NamedGroup {
        self.0.group()
    }
}

struct SuiteRecorder {
    inner: &'static dyn rustls::quic::Algorithm,
    name: &'static str,
}

impl rustls::quic::Algorithm for SuiteRecorder {
    fn packet_key(
        &self,
        key: rustls::crypto::cipher::AeadKey,
        iv: rustls::crypto::cipher::Iv,
    ) -> Box<dyn rustls::quic::PacketKey> {
        NEGOTIATED.lock().unwrap().0 = self.name;
        self.inner.packet_key(key, iv)
    }
    fn header_protection_key(
        &self,
        key: rustls::crypto::cipher::AeadKey,
    ) -> Box<dyn rustls::quic::HeaderProtectionKey> {
        self.inner.header_protection_key(key)
    }
    fn aead_key_len(&self) -> usize {
        self.inner.aead_key_len()
    }
    fn fips(&self) -> bool {
        self.inner.fips()
    }
}

fn provider(groups: Vec<&'static dyn SupportedKxGroup>) -> CryptoProvider {
    let mut p = rustls::crypto::ring::default_provider();
    p.kx_groups = groups
        .into_iter()
        .map(|g| &*Box::leak(Box::new(KxRecorder(g))) as &'static dyn SupportedKxGroup)
        .collect();
    p.cipher_suites = p
        .cipher_suites
        .iter()
        .map(|cs| match cs {
            SupportedCipherSuite::Tls13(s) if s.quic.is_some() => {
                let quic: &'static dyn rustls::quic::Algorithm =
                    Box::leak(Box::new(SuiteRecorder {
                        inner: s.quic.unwrap(),
                        name: cipher_name(s.common.suite),
                    }));
                let wrapped = rustls::Tls13CipherSuite {
                    common: rustls::crypto::CipherSuiteCommon {
                        suite: s.common.suite,
                        hash_provider: s.common.hash_provider,
                        confidentiality_limit: s.common.confidentiality_limit,
                    },
                    hkdf_provider: s.hkdf_provider,
                    aead_alg: s.aead_alg,
                    quic: Some(quic),
                };
                SupportedCipherSuite::Tls13(Box::leak(Box::new(wrapped)))
            }
            other => *other,
        })
        .collect();
    p
}

/// --insecure: any certificate (the handshake's signature is still checked).
#[derive(Debug)]
struct AnyCert(Arc<CryptoProvider>);

impl ServerCertVerifier for AnyCert {
    fn verify_server_cert(
        &self,
        _: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: &ServerName<'_>,
        _: &[u8],
        _: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        CERT_PRESENTED.store(true, Ordering::SeqCst);
        Ok(ServerCertVerified::assertion())
    }
    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }
    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }
    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// --cacert: webpki's verification, and, as OpenSSL (the C tools), a certificate of the CA
/// file itself is trusted as the server's own when it is exactly the one presented (a
/// self-signed server certificate given as its own CA; webpki alone refuses it as
/// "CaUsedAsEndEntity"). Its name is still checked against the URL's.
#[derive(Debug)]
struct CaFile {
    webpki: Arc<rustls::client::WebPkiServerVerifier>,
    anchors: Vec<CertificateDer<'static>>,
    provider: Arc<CryptoProvider>,
}

impl ServerCertVerifier for CaFile {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        CERT_PRESENTED.store(true, Ordering::SeqCst);
        match self
            .webpki
            .verify_server_cert(end_entity, intermediates, server_name, ocsp, now)
        {
            Err(_)
                if self
                    .anchors
                    .iter()
                    .any(|a| a.as_ref() == end_entity.as_ref()) =>
            {
                let cert = rustls::server::ParsedCertificate::try_from(end_entity)?;
                rustls::client::verify_server_name(&cert, server_name)?;
                Ok(ServerCertVerified::assertion())
            }
            other => other,
        }
    }
    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }
    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }
    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

/// --keylog: NSS key log lines, appended.
#[derive(Debug)]
struct KeyLogFile(Mutex<File>);

impl rustls::KeyLog for KeyLogFile {
    fn log(&self, label: &str, client_random: &[u8], secret: &[u8]) {
        let hex = |b: &[u8]| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
        let mut f = self.0.lock().unwrap();
        let _ = writeln!(f, "{label} {} {}", hex(client_random), hex(secret));
    }
}

fn tls_config(o: &Opts) -> Result<rustls::ClientConfig, String> {
    let list = o
        .groups
        .clone()
        .unwrap_or_else(|| "X25519:secp256r1".into()); // the C tools' default
    let mut groups = Vec::new();
    for name in list.split(':') {
        groups.push(
            ring_group(name).ok_or_else(|| format!("tls: quinn does not know the group {name}"))?,
        );
    }
    let provider = Arc::new(provider(groups));
    let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(|e| format!("tls: {e}"))?;
    let mut conf = if o.insecure {
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AnyCert(provider)))
            .with_no_client_auth()
    } else {
        let mut roots = rustls::RootCertStore::empty();
        let pem = match &o.cacert {
            Some(path) => std::fs::read(path).map_err(|e| format!("tls: CA file {path}: {e}"))?,
            // The system's CAs (ca-certificates), as the C tools without --cacert.
            None => std::fs::read("/etc/ssl/certs/ca-certificates.crt").unwrap_or_default(),
        };
        let anchors: Vec<CertificateDer<'static>> =
            CertificateDer::pem_slice_iter(&pem).flatten().collect();
        for cert in &anchors {
            let _ = roots.add(cert.clone());
        }
        if roots.is_empty() {
            return Err(format!(
                "tls: no certificate in CA file {}",
                o.cacert.as_deref().unwrap_or("(system)")
            ));
        }
        let webpki = rustls::client::WebPkiServerVerifier::builder_with_provider(
            Arc::new(roots),
            provider.clone(),
        )
        .build()
        .map_err(|e| format!("tls: {e}"))?;
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(CaFile {
                webpki,
                anchors,
                provider,
            }))
            .with_no_client_auth()
    };
    conf.alpn_protocols = vec![b"h3".to_vec()];
    if o.resume {
        // rustls's in-memory session store (the default), shared by every clone of this
        // config: the warm-up's ticket is there for the measured connections, each of which
        // takes the newest; early data where the ticket allows it.
        conf.enable_early_data = true;
    } else {
        // Every measurement a fresh handshake: rustls would otherwise resume the previous
        // one's session from its in-memory cache.
        conf.resumption = rustls::client::Resumption::disabled();
    }
    Ok(conf)
}

fn quic_config(conf: rustls::ClientConfig) -> Result<Arc<QuicClientConfig>, String> {
    QuicClientConfig::try_from(conf)
        .map(Arc::new)
        .map_err(|e| format!("tls: {e}"))
}

struct Target {
    host: String,
    addr: SocketAddr,
}

fn resolve_target(o: &Opts) -> Result<Target, String> {
    let bad = || format!("url: not an https://NAME[:PORT]/PATH URL: {}", o.url);
    if o.url.contains(char::is_whitespace) {
        return Err(bad());
    }
    let uri: http::Uri = o.url.parse().map_err(|_| bad())?;
    if uri.scheme_str() != Some("https") {
        return Err(bad());
    }
    let host = uri.host().filter(|h| !h.is_empty()).ok_or_else(bad)?;
    let host = host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_string();
    let port = uri.port_u16().unwrap_or(443);
    let mut address = None;
    for r in &o.resolve {
        let p: Vec<&str> = r.splitn(3, ':').collect();
        if p[0] == host && p[1].parse::<u16>() == Ok(port) {
            address = Some(
                p[2].trim_start_matches('[')
                    .trim_end_matches(']')
                    .to_string(),
            );
        }
    }
    let addr = match address {
        Some(a) => a
            .parse::<std::net::IpAddr>()
            .map(|ip| SocketAddr::new(ip, port))
            .map_err(|_| format!("connect: cannot resolve {a}"))?,
        None => (host.as_str(), port)
            .to_socket_addrs()
            .ok()
            .and_then(|mut a| a.next())
            .ok_or_else(|| format!("connect: cannot resolve {host}"))?,
    };
    Ok(Target { host, addr })
}

/// Waits for the socket's pending error (SO_ERROR): an ICMP port unreachable from a server
/// that is down. quinn's socket wrapper waits only for readability, which such an error does
/// not signal (EPOLLERR alone), and swallows receive errors, so without this a server down
/// would be a handshake timeout instead of the C tools' `connect:` row. A duplicate of the
/// socket's descriptor, registered with tokio for error readiness only.
async fn socket_error(watch: &tokio::net::UdpSocket) -> io::Error {
    match watch.ready(tokio::io::Interest::ERROR).await {
        Ok(_) => match watch.take_error() {
            Ok(Some(e)) | Err(e) => e,
            Ok(None) => io::Error::other("socket error"),
        },
        Err(e) => e,
    }
}

fn is_crypto(code: quinn::TransportErrorCode) -> bool {
    (0x100..0x200).contains(&u64::from(code))
}

fn classify_conn(e: &ConnectionError, handshake_done: bool) -> String {
    match e {
        ConnectionError::TransportError(t) if is_crypto(t.code) => format!("tls: {e}"),
        ConnectionError::ConnectionClosed(c) if is_crypto(c.error_code) => format!("tls: {e}"),
        ConnectionError::TimedOut if handshake_done => "timeout: transfer not done".into(),
        ConnectionError::TimedOut => "timeout: handshake not done".into(),
        _ => format!("quic: {e}"),
    }
}

struct Ctx {
    target: Target,
    tls: Arc<QuicClientConfig>,
    warm_tls: Arc<QuicClientConfig>, // --resume's warm-up: the same config, no key log
    cc: Option<String>,
    resume: bool,
    timeout: Duration,
    url: http::Uri,
}

/// The client's UDP socket, counting the bytes of the 0-RTT packets it sends (--resume's
/// `early_data_bytes`): quinn's statistics count datagrams and frames, not packet types. The
/// packet type and Length of a long header are not header-protected, so they can be read here.
#[derive(Debug)]
struct ZeroRttCounter {
    inner: Arc<dyn AsyncUdpSocket>,
    bytes: Arc<AtomicU64>,
}

impl AsyncUdpSocket for ZeroRttCounter {
    fn create_io_poller(self: Arc<Self>) -> Pin<Box<dyn UdpPoller>> {
        self.inner.clone().create_io_poller()
    }
    fn try_send(&self, t: &quinn::udp::Transmit) -> io::Result<()> {
        self.inner.try_send(t)?;
        // With GSO one transmit is several datagrams of segment_size bytes (the last shorter).
        let size = t.segment_size.unwrap_or(t.contents.len()).max(1);
        let n: usize = t.contents.chunks(size).map(zero_rtt_bytes).sum();
        self.bytes.fetch_add(n as u64, Ordering::Relaxed);
        Ok(())
    }
    fn poll_recv(
        &self,
        cx: &mut Context,
        bufs: &mut [IoSliceMut<'_>],
        meta: &mut [quinn::udp::RecvMeta],
    ) -> Poll<io::Result<usize>> {
        self.inner.poll_recv(cx, bufs, meta)
    }
    fn local_addr(&self) -> io::Result<SocketAddr> {
        self.inner.local_addr()
    }
    fn max_transmit_segments(&self) -> usize {
        self.inner.max_transmit_segments()
    }
    fn max_receive_segments(&self) -> usize {
        self.inner.max_receive_segments()
    }
    fn may_fragment(&self) -> bool {
        self.inner.may_fragment()
    }
}

/// One measurement's socket and endpoint.
struct Wire {
    endpoint: quinn::Endpoint,
    watch: tokio::net::UdpSocket, // the socket's error readiness (socket_error)
    zero_rtt: Arc<AtomicU64>,
}

/// A fresh UDP socket per measurement, connected: ENETUNREACH shows at connect(), an ICMP port
/// unreachable on a later receive.
fn open(c: &Ctx, m: &mut Measurement) -> io::Result<Wire> {
    let bind: SocketAddr = if c.target.addr.is_ipv6() {
        "[::]:0"
    } else {
        "0.0.0.0:0"
    }
    .parse()
    .unwrap();
    let sock = UdpSocket::bind(bind)?;
    sock.connect(c.target.addr)?;
    m.local = sock.local_addr().ok();
    let watch = sock.try_clone()?;
    watch.set_nonblocking(true)?;
    let watch = tokio::net::UdpSocket::from_std(watch)?;
    let runtime: Arc<dyn Runtime> = Arc::new(TokioRuntime);
    let zero_rtt = Arc::new(AtomicU64::new(0));
    let counter = ZeroRttCounter {
        inner: runtime.wrap_udp_socket(sock)?,
        bytes: zero_rtt.clone(),
    };
    let endpoint = quinn::Endpoint::new_with_abstract_socket(
        quinn::EndpointConfig::default(),
        None,
        Arc::new(counter),
        runtime,
    )?;
    Ok(Wire {
        endpoint,
        watch,
        zero_rtt,
    })
}

fn client_config(c: &Ctx, tls: &Arc<QuicClientConfig>) -> quinn::ClientConfig {
    let mut transport = quinn::TransportConfig::default();
    // quinn's own idle timeout (30 s) must not end a measurement --timeout allows longer.
    transport
        .max_idle_timeout(quinn::IdleTimeout::try_from(c.timeout + Duration::from_secs(1)).ok());
    match c.cc.as_deref() {
        Some("reno") => {
            transport.congestion_controller_factory(Arc::new(
                quinn::congestion::NewRenoConfig::default(),
            ));
        }
        Some("bbr") => {
            transport
                .congestion_controller_factory(Arc::new(quinn::congestion::BbrConfig::default()));
        }
        _ => {} // quinn's default: CUBIC
    }
    let mut config = quinn::ClientConfig::new(tls.clone());
    config.transport_config(Arc::new(transport));
    config
}

/// When the handshake completed, counted from the measurement's start.
#[derive(Default)]
struct Handshake {
    t: f64,
    cpu_ms: Option<f64>,
    early_accepted: bool, // the server took the 0-RTT packets
    cpu0: f64,
}

impl Handshake {
    fn done(&mut self, early_accepted: bool) {
        self.t = now();
        self.cpu_ms = Some(process_cpu_ms() - self.cpu0);
        self.early_accepted = early_accepted;
    }
}

async fn measure(c: &Ctx, tls: &Arc<QuicClientConfig>, body: &mut dyn Write) -> Measurement {
    let mut m = Measurement::default();
    let deadline = Instant::now() + c.timeout;
    let wire = match open(c, &mut m) {
        Ok(w) => w,
        Err(e) => {
            m.err = format!("connect: {e}");
            return m;
        }
    };
    *NEGOTIATED.lock().unwrap() = ("", "");
    CERT_PRESENTED.store(false, Ordering::SeqCst);
    m.t_start = now();
    let mut hs = Handshake {
        cpu0: process_cpu_ms(),
        ..Default::default()
    };
    let config = client_config(c, tls);
    let connecting = match wire
        .endpoint
        .connect_with(config, c.target.addr, &c.target.host)
    {
        Ok(x) => x,
        Err(e) => {
            m.err = format!("quic: {e}");
            return m;
        }
    };
    let run = connect_and_get(c, connecting, &wire, &mut m, &mut hs, body);
    let result = tokio::time::timeout_at(deadline.into(), run).await;
    match result {
        Err(_) if hs.t == 0.0 => m.err = "timeout: handshake not done".into(),
        Err(_) => m.err = "timeout: transfer not done".into(),
        Ok(Err(e)) => m.err = e,
        Ok(Ok(())) if m.status != 200 => m.err = format!("http: status {}", m.status),
        Ok(Ok(())) => {}
    }
    if hs.t != 0.0 {
        m.t_handshake = hs.t;
        m.cpu_ms = hs.cpu_ms;
        let (cipher, group) = *NEGOTIATED.lock().unwrap();
        (m.cipher, m.group) = (cipher.into(), group.into());
        // A resumed TLS 1.3 handshake carries no Certificate: rustls verifies none.
        m.resumed = !CERT_PRESENTED.load(Ordering::SeqCst);
        m.early_bytes = Some(if hs.early_accepted {
            wire.zero_rtt.load(Ordering::Relaxed)
        } else {
            0
        });
    }
    m
}

/// The handshake and the GET. With a ticket that allows early data (--resume), the GET leaves
/// at once as 0-RTT (`into_0rtt`); without one, after the handshake.
async fn connect_and_get(
    c: &Ctx,
    connecting: quinn::Connecting,
    wire: &Wire,
    m: &mut Measurement,
    hs: &mut Handshake,
    body: &mut dyn Write,
) -> Result<(), String> {
    let early = if c.resume {
        connecting.into_0rtt()
    } else {
        Err(connecting)
    };
    let (conn, out) = match early {
        Ok((conn, accepted)) => {
            let out = get_early(c, &conn, accepted, &wire.watch, m, hs, body).await;
            (conn, out)
        }
        Err(connecting) => {
            let conn = tokio::select! {
                c = connecting => c.map_err(|e| classify_conn(&e, false))?,
                e = socket_error(&wire.watch) => return Err(format!("connect: {e}")),
            };
            // The Connecting future resolves when quinn's handshake is complete (the server's
            // Finished verified, the client's queued).
            hs.done(false);
            let out = get(c, &conn, m, body).await;
            (conn, out)
        }
    };
    if let Some(hd) = conn
        .handshake_data()
        .and_then(|d| d.downcast::<quinn::crypto::rustls::HandshakeData>().ok())
    {
        m.alpn = String::from_utf8_lossy(hd.protocol.as_deref().unwrap_or_default()).into_owned();
    }
    // H3_NO_ERROR. Let the connection's task send its CONNECTION_CLOSE before the endpoint
    // goes (one runtime thread: the task woken by close() runs before this one resumes).
    conn.close(0x100u32.into(), b"");
    tokio::task::yield_now().await;
    out
}

/// The GET in 0-RTT while the handshake completes; `accepted` resolves at its end (quinn's
/// Connected event), which is the handshake's time. A server that resumes but refuses the
/// early data (quinn then fails the 0-RTT streams) gets the GET again in 1-RTT on the same
/// connection, as quicgo_perf does.
async fn get_early(
    c: &Ctx,
    conn: &quinn::Connection,
    mut accepted: quinn::ZeroRttAccepted,
    watch: &tokio::net::UdpSocket,
    m: &mut Measurement,
    hs: &mut Handshake,
    body: &mut dyn Write,
) -> Result<(), String> {
    let first = {
        let fetch = get(c, conn, &mut *m, &mut *body);
        tokio::pin!(fetch);
        loop {
            tokio::select! {
                // The handshake first: its end and the response's first data can be read in
                // one wake-up, and it must be timed before them.
                biased;
                ok = &mut accepted, if hs.t == 0.0 => {
                    if let Some(e) = conn.close_reason() {
                        break Some(Err(classify_conn(&e, false)));
                    }
                    hs.done(ok);
                    if !ok {
                        break None;
                    }
                }
                out = &mut fetch => break Some(out),
                e = socket_error(watch) => break Some(Err(format!("connect: {e}"))),
            }
        }
    }; // the 0-RTT attempt's h3 connection and streams are dropped here, before a second one
    match first {
        Some(out) => {
            if out.is_ok() && hs.t == 0.0 {
                // Not seen: 1-RTT data is read only after the handshake, which wakes first.
                hs.done(accepted.await);
            }
            out
        }
        None => get(c, conn, m, body).await,
    }
}

async fn get(
    c: &Ctx,
    conn: &quinn::Connection,
    m: &mut Measurement,
    body: &mut dyn Write,
) -> Result<(), String> {
    let failed = |e: &dyn std::fmt::Display| format!("quic: {e}");
    // No GREASE frames: HAProxy 3.0 answers a request stream that carries one with 400
    // (every request, india path); Caddy, nginx, quiche and quinn servers ignore them.
    let (mut driver, mut send) = h3::client::builder()
        .send_grease(false)
        .build::<_, _, bytes::Bytes>(h3_quinn::Connection::new(conn.clone()))
        .await
        .map_err(|e| failed(&e))?;
    let req = http::Request::get(c.url.clone())
        .header("user-agent", format!("quinn_perf/{TOOL_VERSION}"))
        .body(())
        .map_err(|e| format!("url: {e}"))?;
    let request = async {
        let mut stream = send.send_request(req).await.map_err(|e| failed(&e))?;
        stream.finish().await.map_err(|e| failed(&e))?;
        let resp = stream.recv_response().await.map_err(|e| failed(&e))?;
        // h3 hands the response over once its HEADERS frame is decoded: its first byte, as
        // near as this API shows it.
        m.t_first_byte = now();
        m.status = resp.status().as_u16();
        let mut h = Sha256::new();
        while let Some(mut chunk) = stream.recv_data().await.map_err(|e| failed(&e))? {
            while chunk.has_remaining() {
                let part = chunk.chunk();
                h.update(part);
                body.write_all(part)
                    .map_err(|e| format!("quic: writing the body: {e}"))?;
                m.bytes += part.len() as u64;
                let n = part.len();
                chunk.advance(n);
            }
        }
        m.t_done = now();
        m.digest = h.finalize().iter().map(|x| format!("{x:02x}")).collect();
        Ok(())
    };
    // The h3 driver (the control streams) is polled in this future, not a task of its own:
    // dropping the future (a refused 0-RTT attempt) drops every stream of this h3 connection
    // at once, before the next one reuses their stream IDs.
    tokio::select! {
        biased;
        out = request => out,
        e = std::future::poll_fn(|cx| driver.poll_close(cx)) => Err(failed(&e)),
    }
}

fn open_out(path: &str, append: bool) -> File {
    let mut oo = OpenOptions::new();
    oo.create(true);
    if append {
        oo.append(true);
    } else {
        oo.write(true).truncate(true);
    }
    oo.open(path).unwrap_or_else(|e| {
        eprintln!("quinn_perf: {path}: {e}");
        std::process::exit(2)
    })
}

fn main() {
    let o = parse(std::env::args().skip(1).collect());
    if let Some(why) = unsupported(&o) {
        eprintln!("quinn_perf: unsupported: {why}");
        std::process::exit(EXIT_UNSUPPORTED);
    }
    let keylog = o
        .keylog
        .as_deref()
        .map(|p| Arc::new(KeyLogFile(Mutex::new(open_out(p, true)))));
    let mut body: Box<dyn Write> = match &o.output_body {
        Some(p) => Box::new(io::BufWriter::new(open_out(p, false))),
        None => Box::new(io::sink()),
    };
    let target = resolve_target(&o);
    let setup = target.as_ref().map_err(|e| e.clone()).and_then(|t| {
        let mut conf = tls_config(&o)?;
        // The warm-up's secrets stay out of the key log (quiche_perf's and aioquic_perf's
        // warm-ups log none); its clone shares the session store.
        let warm_tls = quic_config(conf.clone())?;
        if let Some(k) = keylog {
            conf.key_log = k;
        }
        Ok(Ctx {
            target: Target {
                host: t.host.clone(),
                addr: t.addr,
            },
            tls: quic_config(conf)?,
            warm_tls,
            cc: o.cc.clone(),
            resume: o.resume,
            timeout: Duration::from_secs(o.timeout_s),
            url: o.url.parse().map_err(|_| format!("url: {}", o.url))?,
        })
    });
    // One runtime thread: the handshake's CPU is this process's, and nothing runs in parallel.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    // --resume: an unprinted warm-up connection leaves the session ticket every measured one
    // resumes (each then leaves its own newest tickets for the next); its error is every row's.
    let setup = setup.and_then(|ctx| {
        if o.resume {
            let warm = rt.block_on(measure(&ctx, &ctx.warm_tls, &mut io::sink()));
            if !warm.err.is_empty() {
                return Err(warm.err);
            }
        }
        Ok(ctx)
    });
    let library = library();
    let asked = Asked {
        tool: TOOL,
        tool_version: TOOL_VERSION,
        library: &library,
        url: &o.url,
        sha: o.sha,
        cc: o.cc.as_deref(),
        resume: o.resume,
        n: o.n,
        pause_ms: o.pause_ms,
        cpu: o.cpu,
    };
    let remote = target.as_ref().ok().map(|t| t.addr);
    let failed = print_rows(&asked, remote, || match &setup {
        Ok(ctx) => rt.block_on(measure(ctx, &ctx.tls, &mut body)),
        Err(e) => Measurement {
            err: e.clone(),
            ..Default::default()
        },
    });
    let _ = body.flush();
    std::process::exit(if failed { 1 } else { 0 })
}
