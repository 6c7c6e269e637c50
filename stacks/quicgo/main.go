// quicgo_perf: HTTP/3 GETs through quic-go's public API (quic.Dial, http3.Transport's
// ClientConn), one JSON row per measurement with the perf tools' keys (clients/perf/README.md).
// Exit 0 all measurements succeeded, 1 a row has an error, 2 usage error, 3 unsupported.
package main

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"
)

const (
	toolName        = "quicgo" // the row's tool: the client's name in the testbed
	toolVersion     = "0.1.0"
	exitUnsupported = 3
	maxStreams      = 1000 // --streams' bound: far above a server's stream limit (100-128)
	// With --streams N > 1 the first stream asks for the object's first firstRange bytes and
	// learns its size from Content-Range; the other N-1 streams' requests leave then, one RTT
	// after the first. The link does not wait for them as long as this range outlasts the
	// server's first round trip of slow start (its initial window: 10-32 packets, at most
	// about 46 KB among the shipped servers), which is all it may send before their requests
	// arrive anyway. README.md: why this design and not a --size argument or N whole copies.
	firstRange = 128 << 10
	// --sha256 or --output-body with --streams assembles the object in memory (the ranges
	// arrive interleaved): refuse a Content-Range total beyond this rather than allocate it.
	maxAssemble = 1 << 30
)

type resolveList []string

func (r *resolveList) String() string     { return strings.Join(*r, ",") }
func (r *resolveList) Set(v string) error { *r = append(*r, v); return nil }

type options struct {
	url, cacert, keylog, qlog, outputBody, cc, groups, backend, http, tls string
	resolve                                                               resolveList
	insecure, cpu, discard, sha, resume, cold, verbose, curlTimers        bool
	n, streams                                                            int
	pause                                                                 float64
	timeout                                                               int
}

func usage(msg string) {
	fmt.Fprintf(os.Stderr, "usage: quicgo_perf --url https://NAME[:PORT]/PATH [options] (%s; see --help)\n", msg)
	os.Exit(2)
}

func parse(args []string) options {
	var o options
	fs := flag.NewFlagSet("quicgo_perf", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&o.url, "url", "", "")
	fs.Var(&o.resolve, "resolve", "")
	fs.StringVar(&o.cacert, "cacert", "", "")
	fs.BoolVar(&o.insecure, "insecure", false, "")
	fs.IntVar(&o.n, "n", 1, "")
	fs.IntVar(&o.n, "repetitions", 1, "")
	fs.Float64Var(&o.pause, "pause", 0, "")
	fs.IntVar(&o.timeout, "timeout", 30, "")
	fs.IntVar(&o.streams, "streams", 1, "")
	fs.BoolVar(&o.cpu, "cpu", false, "")
	fs.StringVar(&o.keylog, "keylog", "", "")
	fs.StringVar(&o.qlog, "qlog", "", "")
	fs.StringVar(&o.outputBody, "output-body", "", "")
	fs.BoolVar(&o.discard, "discard", false, "")
	fs.BoolVar(&o.sha, "sha256", false, "")
	fs.BoolVar(&o.resume, "resume", false, "")
	fs.BoolVar(&o.cold, "cold", false, "")
	fs.BoolVar(&o.verbose, "verbose", false, "")
	fs.BoolVar(&o.curlTimers, "curl-timers", false, "")
	fs.StringVar(&o.cc, "cc", "", "")
	fs.StringVar(&o.groups, "groups", "", "")
	fs.StringVar(&o.backend, "backend", "quic-go", "")
	fs.StringVar(&o.http, "http", "3", "")
	fs.StringVar(&o.tls, "tls", "1.3", "")
	version := fs.Bool("version", false, "")
	help := fs.Bool("help", false, "")
	if err := fs.Parse(args); err != nil {
		usage(err.Error())
	}
	if *help {
		fmt.Println("usage: quicgo_perf --url URL [--resolve NAME:PORT:ADDR] [--cacert FILE | --insecure] [-n N] [--pause MS]\n" +
			"  [--timeout S] [--cpu] [--keylog FILE] [--output-body FILE | --discard] [--sha256] [--groups LIST]\n" +
			"  [--streams N]  (N > 1: the object in N byte ranges, N streams on one connection)\n" +
			"Exit status: 0 all measurements succeeded, 1 some failed, 2 usage error, 3 unsupported (no rows).")
		os.Exit(0)
	}
	if *version {
		fmt.Printf("quicgo_perf %s (%s)\n", toolVersion, library())
		os.Exit(0)
	}
	switch {
	case fs.NArg() > 0:
		usage("stray argument " + fs.Arg(0))
	case o.url == "":
		usage("--url is required")
	case o.n < 1:
		usage("-n must be at least 1")
	case o.timeout < 1:
		usage("--timeout must be at least 1")
	case o.streams < 1 || o.streams > maxStreams:
		usage(fmt.Sprintf("--streams must be 1 to %d", maxStreams))
	case o.pause < 0:
		usage("--pause must not be negative")
	case o.backend != "quic-go":
		usage("--backend: only quic-go")
	case o.http != "3":
		usage("--http: only 3")
	case o.tls != "1.3":
		usage("--tls: only 1.3")
	case o.insecure && o.cacert != "":
		usage("--cacert and --insecure exclude each other")
	case o.outputBody != "" && o.discard:
		usage("--output-body and --discard exclude each other")
	}
	for _, r := range o.resolve {
		parts := strings.SplitN(r, ":", 3)
		if len(parts) != 3 || parts[0] == "" || parts[2] == "" {
			usage("--resolve " + r + " is not NAME:PORT:ADDR")
		}
		if _, err := strconv.Atoi(parts[1]); err != nil {
			usage("--resolve " + r + " is not NAME:PORT:ADDR")
		}
	}
	return o
}

// Key-exchange groups by OpenSSL's names (the C tools' --groups).
var groupNames = map[string]tls.CurveID{
	"X25519": tls.X25519, "secp256r1": tls.CurveP256, "secp384r1": tls.CurveP384,
	"secp521r1": tls.CurveP521, "X25519MLKEM768": tls.X25519MLKEM768,
}

func unsupported(o options) string {
	switch {
	case o.qlog != "":
		return "--qlog: quic-go v0.63 writes a newer qlog draft than the testbed's 0.3 JSON-SEQ"
	case o.cc != "":
		return "--cc: quic-go cannot choose its congestion control (its own CUBIC/NewReno)"
	case o.curlTimers:
		return "--curl-timers: there is no libcurl in quicgo_perf"
	case o.streams > 1 && o.resume:
		// The streams check and the resumption check are judged apart (analysis/stack_matrix.py
		// files a row under one check), and the first range as 0-RTT, resent on rejection,
		// would need its own timing rules: not combined.
		return "--streams with --resume: not combined (measure them apart)"
	}
	return ""
}

func curves(list string) ([]tls.CurveID, string) {
	if list == "" {
		list = "X25519:secp256r1" // the C tools' default
	}
	var out []tls.CurveID
	for _, name := range strings.Split(list, ":") {
		id, ok := groupNames[name]
		if !ok {
			return nil, name
		}
		out = append(out, id)
	}
	return out, ""
}

func library() string {
	ver := "unknown"
	goVer := ""
	if info, ok := debug.ReadBuildInfo(); ok {
		goVer = info.GoVersion
		for _, dep := range info.Deps {
			if dep.Path == "github.com/quic-go/quic-go" {
				ver = dep.Version
			}
		}
	}
	return "quic-go/" + ver + " " + strings.Replace(goVer, "go", "Go/", 1)
}

type target struct {
	host, authority string
	addr            *net.UDPAddr
}

func resolveTarget(o options) (target, string) {
	u, err := url.Parse(o.url)
	if err != nil || u.Scheme != "https" || u.Hostname() == "" || strings.ContainsAny(o.url, " \t") {
		return target{}, "url: not an https://NAME[:PORT]/PATH URL: " + o.url
	}
	port := u.Port()
	if port == "" {
		port = "443"
	}
	address := ""
	for _, r := range o.resolve {
		p := strings.SplitN(r, ":", 3)
		if p[0] == u.Hostname() && p[1] == port {
			address = p[2]
		}
	}
	if address == "" {
		addrs, err := net.LookupHost(u.Hostname())
		if err != nil || len(addrs) == 0 {
			return target{}, "connect: cannot resolve " + u.Hostname()
		}
		address = addrs[0]
	}
	udp, err := net.ResolveUDPAddr("udp", net.JoinHostPort(address, port))
	if err != nil {
		return target{}, "connect: " + err.Error()
	}
	return target{host: u.Hostname(), authority: u.Host, addr: udp}, ""
}

// connectedConn is a connected UDP socket as a plain net.PacketConn: quic-go writes to its one
// peer, and an ICMP port unreachable (no server) comes back as a read error, a "connect:" row
// at once instead of a handshake timeout. Plain on purpose: a *net.UDPConn would make quic-go
// use sendmsg with an address (refused on a connected socket), so it runs without GSO and ECN.
type connectedConn struct {
	udp     *net.UDPConn
	peer    net.Addr
	zeroRTT *int64     // bytes of the 0-RTT packets written (quic-go counts no early stream bytes)
	conns   *sourceIDs // the connections the socket carried, counted on the wire
}

// sourceIDs: the client's source connection IDs seen in the long-header packets it wrote. Every
// long-header packet of a connection carries its one client SCID (Initial, 0-RTT, Handshake,
// in any QUIC version), so their number is the connections this socket opened: the row's
// `connections`, counted from what left, not from the code's belief that it dialed once.
type sourceIDs struct {
	mu   sync.Mutex
	seen map[string]bool
}

func (s *sourceIDs) note(b []byte) {
	// Long header: flags(1) version(4) DCID length(1) DCID, SCID length(1) SCID ...
	if len(b) < 6 || b[0]&0x80 == 0 {
		return
	}
	at := 6 + int(b[5])
	if at >= len(b) || at+1+int(b[at]) > len(b) {
		return
	}
	scid := string(b[at+1 : at+1+int(b[at])])
	s.mu.Lock()
	s.seen[scid] = true
	s.mu.Unlock()
}

func (s *sourceIDs) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.seen)
}

// A QUIC v1 long header's first byte: form bit 0x80, packet type 0-RTT = 01 in bits 0x30.
func isZeroRTT(b []byte) bool { return len(b) > 0 && b[0]&0x80 != 0 && (b[0]&0x30)>>4 == 1 }

func (c connectedConn) WriteTo(b []byte, _ net.Addr) (int, error) {
	if c.zeroRTT != nil && isZeroRTT(b) {
		*c.zeroRTT += int64(len(b))
	}
	if c.conns != nil {
		c.conns.note(b)
	}
	return c.udp.Write(b)
}
func (c connectedConn) ReadFrom(b []byte) (int, net.Addr, error) {
	n, err := c.udp.Read(b)
	return n, c.peer, err
}
func (c connectedConn) Close() error                       { return c.udp.Close() }
func (c connectedConn) LocalAddr() net.Addr                { return c.udp.LocalAddr() }
func (c connectedConn) SetDeadline(t time.Time) error      { return c.udp.SetDeadline(t) }
func (c connectedConn) SetReadDeadline(t time.Time) error  { return c.udp.SetReadDeadline(t) }
func (c connectedConn) SetWriteDeadline(t time.Time) error { return c.udp.SetWriteDeadline(t) }

type measurement struct {
	tStart, tHandshake, tFirstByte, tDone float64
	cpuMs                                 *float64
	localIP                               string
	localPort, status                     int
	bytes                                 int64
	cipher, group, alpn                   string
	err                                   string
	digest                                string
	resumed                               bool
	earlyBytes                            *int64 // --resume only: 0-RTT packet bytes the server accepted
	streamsDone, connections              int    // --streams N > 1 only: streams whole, connections opened
}

func now() float64 { return float64(time.Now().UnixNano()) / 1e9 }

func procCPU() float64 {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e6
}

func classify(err error, handshakeDone bool, ctx context.Context) string {
	var te *quic.TransportError
	var ue x509.UnknownAuthorityError
	var he x509.HostnameError
	var ci x509.CertificateInvalidError
	var idle *quic.IdleTimeoutError
	var hs *quic.HandshakeTimeoutError
	var se syscall.Errno
	switch {
	case errors.As(err, &ue) || errors.As(err, &he) || errors.As(err, &ci):
		return "tls: " + err.Error()
	case errors.As(err, &te) && te.ErrorCode.IsCryptoError():
		return "tls: " + err.Error()
	case errors.As(err, &se) && (se == syscall.ECONNREFUSED || se == syscall.ENETUNREACH || se == syscall.EHOSTUNREACH):
		return "connect: " + se.Error()
	case errors.Is(err, context.DeadlineExceeded) || ctx.Err() != nil || errors.As(err, &idle) || errors.As(err, &hs):
		if handshakeDone {
			return "timeout: transfer not done"
		}
		return "timeout: handshake not done"
	}
	return "quic: " + err.Error()
}

func measure(o options, t target, tlsConf *tls.Config, body io.Writer) (m measurement) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(o.timeout)*time.Second)
	defer cancel()
	udp, err := net.DialUDP("udp", nil, t.addr)
	if err != nil {
		m.err = "connect: " + err.Error()
		return m
	}
	defer udp.Close()
	local := udp.LocalAddr().(*net.UDPAddr)
	m.localIP, m.localPort = local.IP.String(), local.Port
	var zeroRTT int64
	conns := &sourceIDs{seen: map[string]bool{}}
	pc := connectedConn{udp, t.addr, &zeroRTT, conns}
	defer func() { m.connections = conns.count() }() // after the close: every packet written
	m.tStart = now()
	cpu0 := procCPU()
	var conn *quic.Conn
	if o.resume {
		// With a ticket, DialEarly returns before the handshake ends, and the request goes
		// out as 0-RTT; the handshake's end is timed where it happens.
		conn, err = quic.DialEarly(ctx, pc, t.addr, tlsConf, &quic.Config{Allow0RTT: true})
	} else {
		conn, err = quic.Dial(ctx, pc, t.addr, tlsConf, &quic.Config{})
	}
	if err != nil {
		m.err = classify(err, false, ctx)
		return m
	}
	defer func() { conn.CloseWithError(0, "") }()
	var handshake chan float64 // with --resume, the handshake ends after DialEarly returns
	if o.resume {
		handshake = make(chan float64, 1)
		go func() {
			select {
			case <-conn.HandshakeComplete():
				handshake <- now()
			case <-ctx.Done():
				handshake <- 0
			}
		}()
	} else {
		m.tHandshake = now() // quic.Dial returns with the handshake complete
		m.handshakeState(conn, cpu0)
	}
	if o.streams > 1 {
		m.fetchStreams(ctx, conn, o, body)
		return m
	}
	method := http.MethodGet
	if o.resume {
		method = http3.MethodGet0RTT
	}
	resp, err := m.get(ctx, conn, o.url, method)
	if o.resume && errors.Is(err, quic.Err0RTTRejected) {
		// The server resumed but refused early data (nginx): the request again, in 1-RTT.
		var next *quic.Conn
		if next, err = conn.NextConnection(ctx); err == nil {
			conn = next
			resp, err = m.get(ctx, conn, o.url, http.MethodGet)
		}
	}
	if o.resume {
		m.tHandshake = <-handshake
		if m.tHandshake != 0 {
			m.handshakeState(conn, cpu0)
			early := int64(0)
			if conn.ConnectionState().Used0RTT {
				early = zeroRTT
			}
			m.earlyBytes = &early
		}
	}
	if err != nil {
		m.err = classify(err, m.tHandshake != 0, ctx)
		return m
	}
	defer resp.Body.Close()
	m.status = resp.StatusCode
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(h, body), resp.Body)
	m.bytes = n
	if err != nil {
		m.err = classify(err, true, ctx)
		return m
	}
	m.tDone = now()
	m.digest = hex.EncodeToString(h.Sum(nil))
	if m.status != 200 {
		m.err = fmt.Sprintf("http: status %d", m.status)
	}
	return m
}

// handshakeState: what the finished handshake negotiated, and the CPU it took the client
// (with --resume, the request's sending is in it too: they overlap).
func (m *measurement) handshakeState(conn *quic.Conn, cpu0 float64) {
	if m.tHandshake == 0 {
		return
	}
	cpu := procCPU() - cpu0
	m.cpuMs = &cpu
	state := conn.ConnectionState().TLS
	m.cipher = tls.CipherSuiteName(state.CipherSuite)
	m.group = groupName(state.CurveID)
	m.alpn = state.NegotiatedProtocol
	m.resumed = state.DidResume
}

func (m *measurement) get(ctx context.Context, conn *quic.Conn, rawURL, method string) (*http.Response, error) {
	cc := (&http3.Transport{}).NewClientConn(conn)
	trace := &httptrace.ClientTrace{GotFirstResponseByte: func() {
		if m.tFirstByte == 0 {
			m.tFirstByte = now()
		}
	}}
	req, err := http.NewRequestWithContext(httptrace.WithClientTrace(ctx, trace), method, rawURL, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("User-Agent", "quicgo_perf/"+toolVersion)
	return cc.RoundTrip(req)
}

// byteRange: one stream's share of the object, first and last byte inclusive (HTTP's form).
type byteRange struct{ first, last int64 }

func (r byteRange) size() int64 { return r.last - r.first + 1 }

// fetchStreams: --streams N > 1. The object once, in N byte ranges, N request streams of one
// HTTP/3 connection: the first asks for its first firstRange bytes and its Content-Range tells
// the object's size; the other N-1 then split the rest evenly and go at once. A server that
// ignores Range (200), a range it answers otherwise than asked, or a body that is not exactly
// its range's bytes make the row's error: those numbers would not be N streams of one object.
func (m *measurement) fetchStreams(ctx context.Context, conn *quic.Conn, o options, body io.Writer) {
	sctx, cancel := context.WithCancel(ctx) // the first failure stops the other streams
	defer cancel()
	var mu sync.Mutex
	fail := func(msg string) {
		mu.Lock()
		if m.err == "" {
			m.err = msg
		}
		mu.Unlock()
		cancel()
	}
	// The other streams' errors after a failure are its consequence (canceled): the first
	// one is the row's, classified against the measurement's own deadline; the stream's
	// number follows the category (a timeout is the whole transfer's).
	failErr := func(i int, err error) {
		msg := classify(err, true, ctx)
		if !strings.HasPrefix(msg, "timeout:") {
			msg = strings.Replace(msg, ": ", fmt.Sprintf(": stream %d: ", i), 1)
		}
		fail(msg)
	}
	cc := (&http3.Transport{}).NewClientConn(conn)
	trace := &httptrace.ClientTrace{GotFirstResponseByte: func() {
		if m.tFirstByte == 0 {
			m.tFirstByte = now()
		}
	}}
	ranges := []byteRange{{0, firstRange - 1}}
	first, err := rangeGet(httptrace.WithClientTrace(sctx, trace), cc, o.url, ranges[0])
	if err != nil {
		failErr(0, err)
		return
	}
	m.status = first.StatusCode
	total, msg := checkRange(first, 0, ranges[0], -1, o.streams)
	if msg == "" && total < firstRange+int64(o.streams-1) {
		msg = fmt.Sprintf("http: the object's %d bytes are too few for %d streams (the first takes %d)",
			total, o.streams, firstRange)
	}
	var whole []byte // the object, assembled for --sha256 or --output-body
	if msg == "" && (o.sha || body != io.Discard) {
		if total > maxAssemble {
			msg = fmt.Sprintf("http: the object's %d bytes are too many to assemble for --sha256 or --output-body", total)
		} else {
			whole = make([]byte, total)
		}
	}
	if msg != "" {
		first.Body.Close()
		fail(msg)
		return
	}
	rest := total - firstRange
	for i := int64(1); i < int64(o.streams); i++ {
		n := int64(o.streams - 1)
		ranges = append(ranges, byteRange{firstRange + (i-1)*rest/n, firstRange + i*rest/n - 1})
	}
	got := make([]int64, o.streams)
	done := make([]float64, o.streams)
	read := func(i int, resp *http.Response) {
		defer resp.Body.Close()
		sink := &rangeSink{want: ranges[i].size()}
		if whole != nil {
			sink.buf = whole[ranges[i].first : ranges[i].last+1]
		}
		n, err := io.Copy(sink, resp.Body)
		got[i] = n
		switch {
		case errors.Is(err, errPastRange):
			fail(fmt.Sprintf("http: stream %d: more than the %d bytes of its range", i, sink.want))
		case err != nil:
			failErr(i, err)
		case n != sink.want:
			fail(fmt.Sprintf("http: stream %d: ended after %d of its range's %d bytes", i, n, sink.want))
		default:
			done[i] = now()
		}
	}
	var wg sync.WaitGroup
	wg.Add(o.streams)
	go func() { defer wg.Done(); read(0, first) }()
	for i := 1; i < o.streams; i++ {
		go func() {
			defer wg.Done()
			resp, err := rangeGet(sctx, cc, o.url, ranges[i])
			if err != nil {
				failErr(i, err)
				return
			}
			if _, msg := checkRange(resp, i, ranges[i], total, o.streams); msg != "" {
				resp.Body.Close()
				fail(msg)
				return
			}
			read(i, resp)
		}()
	}
	wg.Wait()
	for i := range done {
		m.bytes += got[i]
		if done[i] != 0 {
			m.streamsDone++
			m.tDone = max(m.tDone, done[i])
		}
	}
	if m.err != "" {
		m.tDone = 0
		return
	}
	if whole != nil {
		h := sha256.Sum256(whole)
		m.digest = hex.EncodeToString(h[:])
		if _, err := body.Write(whole); err != nil {
			m.err = "http: --output-body: " + err.Error()
		}
	}
}

func rangeGet(ctx context.Context, cc *http3.ClientConn, rawURL string, r byteRange) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, rawURL, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("User-Agent", "quicgo_perf/"+toolVersion)
	req.Header.Set("Range", fmt.Sprintf("bytes=%d-%d", r.first, r.last))
	return cc.RoundTrip(req)
}

// checkRange: the object's total size from a response to stream i's range request (total < 0:
// not known yet, the first stream), or why the response is not that range of the object.
func checkRange(resp *http.Response, i int, r byteRange, total int64, streams int) (int64, string) {
	switch {
	case resp.StatusCode == http.StatusOK:
		return 0, fmt.Sprintf("http: stream %d: status 200 to a Range request (the server ignores Range:"+
			" each of the %d streams would fetch the whole object)", i, streams)
	case resp.StatusCode != http.StatusPartialContent && i == 0:
		return 0, fmt.Sprintf("http: status %d", resp.StatusCode) // as without --streams (404...)
	case resp.StatusCode != http.StatusPartialContent:
		return 0, fmt.Sprintf("http: stream %d: status %d", i, resp.StatusCode)
	}
	if enc := resp.Header.Get("Content-Encoding"); enc != "" && enc != "identity" {
		return 0, fmt.Sprintf("http: stream %d: Content-Encoding %s on a range", i, enc)
	}
	cr := resp.Header.Get("Content-Range")
	var first, last, size int64
	if n, err := fmt.Sscanf(cr, "bytes %d-%d/%d", &first, &last, &size); err != nil || n != 3 ||
		fmt.Sprintf("bytes %d-%d/%d", first, last, size) != cr {
		return 0, fmt.Sprintf("http: stream %d: Content-Range %q is not bytes FIRST-LAST/SIZE", i, cr)
	}
	if total < 0 {
		total = size
	}
	if size != total || first != r.first || last != min(r.last, total-1) {
		return 0, fmt.Sprintf("http: stream %d: asked bytes %d-%d, got Content-Range %s", i, r.first, r.last, cr)
	}
	return total, ""
}

var errPastRange = errors.New("more bytes than the range")

// rangeSink counts a stream's body and keeps it (buf) when the object is assembled; a byte
// past the range is an error, not a silent overcount.
type rangeSink struct {
	buf     []byte
	n, want int64
}

func (s *rangeSink) Write(p []byte) (int, error) {
	if s.n+int64(len(p)) > s.want {
		return 0, errPastRange
	}
	if s.buf != nil {
		copy(s.buf[s.n:], p)
	}
	s.n += int64(len(p))
	return len(p), nil
}

func groupName(id tls.CurveID) string {
	for name, v := range groupNames {
		if v == id {
			return name
		}
	}
	return ""
}

// cpuSampler: every 500 ms the process's share of one CPU and the machine's busy share.
type cpuSampler struct {
	mu      sync.Mutex
	samples []map[string]float64
	stop    chan struct{}
	done    chan struct{}
}

func readJiffies() (proc, all, idle float64) {
	if b, err := os.ReadFile("/proc/self/stat"); err == nil {
		f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
		u, _ := strconv.ParseFloat(f[11], 64)
		s, _ := strconv.ParseFloat(f[12], 64)
		proc = u + s
	}
	if b, err := os.ReadFile("/proc/stat"); err == nil {
		line := strings.SplitN(string(b), "\n", 2)[0]
		for i, f := range strings.Fields(line)[1:] {
			v, _ := strconv.ParseFloat(f, 64)
			all += v
			if i == 3 || i == 4 {
				idle += v
			}
		}
	}
	return
}

func startSampler() *cpuSampler {
	s := &cpuSampler{samples: []map[string]float64{}, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		start := time.Now()
		p0, a0, i0 := readJiffies()
		ncpu := float64(numCPU())
		tick := time.NewTicker(500 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-s.stop:
				return
			case <-tick.C:
				p, a, i := readJiffies()
				if a > a0 {
					s.mu.Lock()
					s.samples = append(s.samples, map[string]float64{
						"t":            time.Since(start).Seconds(),
						"proc_pct":     100 * (p - p0) / ((a - a0) / ncpu),
						"sys_busy_pct": 100 * ((a - a0) - (i - i0)) / (a - a0),
					})
					s.mu.Unlock()
				}
				p0, a0, i0 = p, a, i
			}
		}
	}()
	return s
}

func (s *cpuSampler) finish() []map[string]float64 {
	close(s.stop)
	<-s.done
	return s.samples
}

func numCPU() int {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 1
	}
	n := 0
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "cpu") && !strings.HasPrefix(line, "cpu ") {
			n++
		}
	}
	if n == 0 {
		return 1
	}
	return n
}

func row(o options, t target, m measurement, rep int, cpu []map[string]float64) map[string]any {
	ok := m.err == ""
	ms := func(x float64) any {
		if x == 0 || m.tStart == 0 {
			return nil
		}
		return float64(int64((x-m.tStart)*1e6)) / 1e3
	}
	abs := func(x float64) any {
		if x == 0 {
			return nil
		}
		return x
	}
	r := map[string]any{
		"tool": toolName, "tool_version": toolVersion, "library": library(), "backend": "quic-go",
		"protocol": "quic", "tls_version": "", "http_version": "", "cipher": m.cipher, "tls_group": m.group,
		"local_ip": m.localIP, "local_port": m.localPort, "remote_ip": "", "remote_port": 0,
		"url": o.url, "bytes": m.bytes, "http_status": m.status, "t_start": abs(m.tStart),
		"t_connect": abs(m.tHandshake), "t_handshake": abs(m.tHandshake), "t_first_byte": abs(m.tFirstByte),
		"t_done": nil, "connection_time_ms": ms(m.tHandshake), "client_cpu_ms": nil,
		"ttfb_ms": ms(m.tFirstByte), "download_time_ms": nil, "throughput_mbps": nil,
		"resumed": m.resumed, "cpu": cpu, "rep": rep, "error": m.err,
	}
	if o.resume {
		r["early_data_bytes"] = nil
		if m.earlyBytes != nil {
			r["early_data_bytes"] = *m.earlyBytes
		}
	}
	if o.streams > 1 {
		r["streams"], r["streams_completed"], r["connections"] = o.streams, m.streamsDone, m.connections
	}
	if t.addr != nil {
		r["remote_ip"], r["remote_port"] = t.addr.IP.String(), t.addr.Port
	}
	if m.tHandshake != 0 {
		r["tls_version"] = "TLSv1.3"
	}
	if m.alpn == "h3" {
		r["http_version"] = "3"
	}
	if m.cpuMs != nil {
		r["client_cpu_ms"] = float64(int64(*m.cpuMs*1e3)) / 1e3
	}
	if ok && m.tDone != 0 {
		r["t_done"] = m.tDone
		d := m.tDone - m.tStart
		r["download_time_ms"] = ms(m.tDone)
		r["throughput_mbps"] = float64(m.bytes) * 8 / d / 1e6
	}
	if o.sha {
		r["sha256"] = ""
		if ok {
			r["sha256"] = m.digest
		}
	}
	return r
}

func tlsConfig(o options, t target, keylog io.Writer) (*tls.Config, string) {
	groups, bad := curves(o.groups)
	if bad != "" {
		return nil, "tls: quic-go does not know the group " + bad
	}
	conf := &tls.Config{ServerName: t.host, NextProtos: []string{http3.NextProtoH3}, CurvePreferences: groups,
		KeyLogWriter: keylog, MinVersion: tls.VersionTLS13, InsecureSkipVerify: o.insecure}
	if o.cacert != "" {
		pem, err := os.ReadFile(o.cacert)
		if err != nil {
			return nil, "tls: CA file " + o.cacert + ": " + errors.Unwrap(err).Error()
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, "tls: no certificate in CA file " + o.cacert
		}
		conf.RootCAs = pool
	}
	return conf, ""
}

func openOut(path string, flags int) io.WriteCloser {
	f, err := os.OpenFile(path, flags, 0o644)
	if err != nil {
		fmt.Fprintf(os.Stderr, "quicgo_perf: %s\n", err)
		os.Exit(2)
	}
	return f
}

func main() {
	// One binary, two programs: the replay server under its own name (a link) or as a verb.
	if filepath.Base(os.Args[0]) == "quicgo_replay" {
		os.Exit(replayMain(os.Args[1:]))
	}
	if len(os.Args) > 1 && os.Args[1] == "replay" {
		os.Exit(replayMain(os.Args[2:]))
	}
	o := parse(os.Args[1:])
	if why := unsupported(o); why != "" {
		fmt.Fprintln(os.Stderr, "quicgo_perf: unsupported: "+why)
		os.Exit(exitUnsupported)
	}
	var keylog io.Writer
	if o.keylog != "" {
		f := openOut(o.keylog, os.O_CREATE|os.O_APPEND|os.O_WRONLY)
		defer f.Close()
		keylog = f
	}
	body := io.Discard
	if o.outputBody != "" {
		f := openOut(o.outputBody, os.O_CREATE|os.O_TRUNC|os.O_WRONLY)
		defer f.Close()
		body = f
	}
	t, setupErr := resolveTarget(o)
	var tlsConf *tls.Config
	if setupErr == "" {
		tlsConf, setupErr = tlsConfig(o, t, keylog)
	}
	if setupErr == "" && o.resume {
		// An unprinted warm-up connection leaves a session ticket (and the server's transport
		// parameters) in the cache for every measured connection to resume.
		tlsConf.ClientSessionCache = tls.NewLRUClientSessionCache(4)
		if w := measure(options{url: o.url, timeout: o.timeout}, t, tlsConf, io.Discard); w.err != "" {
			setupErr = w.err
		}
	}
	failed := false
	enc := json.NewEncoder(os.Stdout)
	for rep := 0; rep < o.n; rep++ {
		if rep > 0 && o.pause > 0 {
			time.Sleep(time.Duration(o.pause * float64(time.Millisecond)))
		}
		var sampler *cpuSampler
		if o.cpu {
			sampler = startSampler()
		}
		m := measurement{err: setupErr}
		if setupErr == "" {
			m = measure(o, t, tlsConf, body)
		}
		cpu := []map[string]float64{}
		if sampler != nil {
			cpu = sampler.finish()
		}
		r := row(o, t, m, rep, cpu)
		failed = failed || m.err != ""
		_ = enc.Encode(r)
	}
	if failed {
		os.Exit(1)
	}
}
