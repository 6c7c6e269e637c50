// quicgo_replay: a recorded page's origins served over HTTP/3 (quic-go's http3.Server) and
// HTTP/2 (Go's net/http over TLS) on :443, from a site that workloads/replay.py wrote:
// replay.json and bodies/. The same binary as quicgo_perf, run under this name (a link in
// the image) or as `quicgo_perf replay ...`.
//
// Each request is matched by its authority's host, its method and its target (path and
// query) alone; the recorded status, headers and body answer it no sooner than the record's
// think time (wait_ms) after the request arrived. Every origin's certificate is chosen by
// the ClientHello's server name from --certs (NAME.pem and NAME.key, signed by the run's
// CA); any other name gets --cert/--key, the testbed's own server certificate (the health
// probe asks for server.quicbed), so a browser asking for a name the page never had fails
// to verify it. One JSON line per request on --log, in the fields of nginx's log_format quicbed
// (servers/nginx/nginx.conf), plus the entry answered and the think time kept.
package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"
)

const (
	replayFormat = 1 // of replay.json (workloads/replay.py's FORMAT)
	healthPath   = "/.quicbed-health"
	maxSiteBytes = 64 << 20 // replay.json: a 2,000-entry page is well under 2 MiB
)

type replaySite struct {
	Name    string `json:"name"`
	Port    int    `json:"port"`
	Scheme  string `json:"scheme"`
	Address string `json:"address"`
}

type replayResponse struct {
	Entry     int         `json:"entry"`
	Site      int         `json:"site"`
	Method    string      `json:"method"`
	Target    string      `json:"target"`
	Status    int         `json:"status"`
	Headers   [][2]string `json:"headers"`
	BodyBytes int64       `json:"body_bytes"`
	WaitMs    float64     `json:"wait_ms"`
	Body      string      `json:"body"`
	// What the HAR recorded on the wire (null: not recorded): for the rows, not served.
	TransferBytes *int64 `json:"transfer_bytes"`
}

type replayManifest struct {
	Format    int              `json:"format"`
	Page      string           `json:"page"`
	Sites     []replaySite     `json:"sites"`
	Responses []replayResponse `json:"responses"`
}

type routeKey struct{ host, method, target string }

type replayServer struct {
	bodies string // the site's bodies/ directory
	routes map[routeKey]*replayResponse
	log    *json.Encoder
	logMu  sync.Mutex
	conns  atomic.Int64
}

var bodyName = regexp.MustCompile(`^[0-9a-f]{64}$`)
var hostName = regexp.MustCompile(`^[a-z0-9]([a-z0-9.-]{0,251}[a-z0-9])?$`)

func loadSite(dir string) (*replayManifest, error) {
	f, err := os.Open(filepath.Join(dir, "replay.json"))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var m replayManifest
	dec := json.NewDecoder(io.LimitReader(f, maxSiteBytes))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&m); err != nil {
		return nil, fmt.Errorf("replay.json: %w", err)
	}
	if m.Format != replayFormat {
		return nil, fmt.Errorf("replay.json: format %d, this server reads %d", m.Format, replayFormat)
	}
	for i, site := range m.Sites {
		if !hostName.MatchString(site.Name) {
			return nil, fmt.Errorf("replay.json: sites[%d].name: not a host name: %q", i, site.Name)
		}
	}
	for i, r := range m.Responses {
		if r.Site < 0 || r.Site >= len(m.Sites) {
			return nil, fmt.Errorf("replay.json: responses[%d].site: no site %d", i, r.Site)
		}
		// A body is a file of bodies/ by its digest: no name of the record reaches a path.
		if r.Body != "" && !bodyName.MatchString(r.Body) {
			return nil, fmt.Errorf("replay.json: responses[%d].body: not a sha256: %q", i, r.Body)
		}
		if r.Status < 100 || r.Status > 999 {
			return nil, fmt.Errorf("replay.json: responses[%d].status: %d", i, r.Status)
		}
	}
	return &m, nil
}

func newReplayServer(dir string, m *replayManifest, log io.Writer) *replayServer {
	s := &replayServer{bodies: filepath.Join(dir, "bodies"), routes: map[routeKey]*replayResponse{}, log: json.NewEncoder(log)}
	for i := range m.Responses {
		r := &m.Responses[i]
		key := routeKey{m.Sites[r.Site].Name, r.Method, r.Target}
		if _, seen := s.routes[key]; !seen { // as first recorded (replay.py's plan has no twin)
			s.routes[key] = r
		}
	}
	return s
}

// requestHost: the authority's host, lower case, without the port.
func requestHost(r *http.Request) string {
	host := r.Host
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	return strings.ToLower(host)
}

func (s *replayServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	arrived := time.Now()
	if r.URL.Path == healthPath {
		w.WriteHeader(http.StatusNoContent)
		return
	}
	// The request-target as it arrived (:path), as the HAR recorded it: no re-encoding.
	route := s.routes[routeKey{requestHost(r), r.Method, r.RequestURI}]
	status, sent, entry, wait := http.StatusNotFound, int64(0), -1, 0.0
	if route != nil {
		entry, wait = route.Entry, route.WaitMs
		status, sent = s.answer(w, r, route, arrived)
	} else {
		http.Error(w, "not in the recorded page", status)
	}
	s.logLine(r, status, sent, entry, wait, arrived)
}

func (s *replayServer) answer(w http.ResponseWriter, r *http.Request, route *replayResponse, arrived time.Time) (int, int64) {
	var body *os.File
	if route.Body != "" {
		f, err := os.Open(filepath.Join(s.bodies, route.Body))
		if err != nil {
			http.Error(w, "body missing", http.StatusInternalServerError)
			return http.StatusInternalServerError, 0
		}
		defer f.Close()
		body = f
	}
	// The origin's think time, from the request's arrival: the body is already open.
	if wait := time.Duration(route.WaitMs*float64(time.Millisecond)) - time.Since(arrived); wait > 0 {
		select {
		case <-time.After(wait):
		case <-r.Context().Done():
			return 499, 0
		}
	}
	header := w.Header()
	for _, kv := range route.Headers {
		header.Add(kv[0], kv[1])
	}
	header.Set("Content-Length", strconv.FormatInt(route.BodyBytes, 10))
	w.WriteHeader(route.Status)
	if body == nil || r.Method == http.MethodHead || route.Status == http.StatusNotModified || route.Status == http.StatusNoContent {
		return route.Status, 0
	}
	sent, _ := io.Copy(w, body)
	return route.Status, sent
}

type logLine struct {
	Ts          string  `json:"ts"`
	Proto       string  `json:"proto"`
	TLS         string  `json:"tls"`
	ALPN        string  `json:"alpn"`
	Cipher      string  `json:"cipher"`
	Reused      string  `json:"reused"`
	Method      string  `json:"method"`
	Host        string  `json:"host"`
	Path        string  `json:"path"`
	Status      int     `json:"status"`
	Bytes       int64   `json:"bytes"`
	RequestTime float64 `json:"request_time"`
	Remote      string  `json:"remote"`
	Conn        string  `json:"conn"`
	Entry       int     `json:"entry"`
	WaitMs      float64 `json:"wait_ms"`
}

func (s *replayServer) logLine(r *http.Request, status int, sent int64, entry int, wait float64, arrived time.Time) {
	line := logLine{
		Ts: arrived.UTC().Format(time.RFC3339Nano), Proto: r.Proto, Method: r.Method,
		Host: requestHost(r), Path: r.URL.Path, Status: status, Bytes: sent,
		RequestTime: time.Since(arrived).Seconds(), Remote: r.RemoteAddr, Conn: connID(r),
		Entry: entry, WaitMs: wait,
	}
	if r.TLS != nil {
		line.TLS = tlsVersion(r.TLS.Version)
		line.ALPN = r.TLS.NegotiatedProtocol
		line.Cipher = tls.CipherSuiteName(r.TLS.CipherSuite)
		line.Reused = map[bool]string{true: "r", false: "."}[r.TLS.DidResume]
	}
	s.logMu.Lock()
	defer s.logMu.Unlock()
	_ = s.log.Encode(line)
}

type connKey struct{}

func connID(r *http.Request) string {
	if id, ok := r.Context().Value(connKey{}).(int64); ok {
		return strconv.FormatInt(id, 10)
	}
	return ""
}

func tlsVersion(v uint16) string {
	switch v {
	case tls.VersionTLS13:
		return "TLSv1.3"
	case tls.VersionTLS12:
		return "TLSv1.2"
	}
	return fmt.Sprintf("0x%04x", v)
}

// certificates: NAME.pem and NAME.key of every site name, chosen by the server name asked
// for; fallback (nil: none) answers every other name.
func certificates(dir string, m *replayManifest, fallback *tls.Certificate) (func(*tls.ClientHelloInfo) (*tls.Certificate, error), error) {
	certs := map[string]*tls.Certificate{}
	for _, site := range m.Sites {
		if certs[site.Name] != nil {
			continue
		}
		cert, err := tls.LoadX509KeyPair(filepath.Join(dir, site.Name+".pem"), filepath.Join(dir, site.Name+".key"))
		if err != nil {
			return nil, fmt.Errorf("certificate of %s: %w", site.Name, err)
		}
		certs[site.Name] = &cert
	}
	return func(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
		if cert := certs[strings.ToLower(hello.ServerName)]; cert != nil {
			return cert, nil
		}
		if fallback != nil {
			return fallback, nil
		}
		return nil, fmt.Errorf("no origin %q in the recorded page", hello.ServerName)
	}, nil
}

type replayOptions struct {
	site, certs, cert, key, log, listen string
	version                             bool
}

func parseReplay(args []string) (replayOptions, error) {
	var o replayOptions
	fs := flag.NewFlagSet("quicgo_replay", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&o.site, "site", "", "")
	fs.StringVar(&o.certs, "certs", "", "")
	fs.StringVar(&o.cert, "cert", "", "")
	fs.StringVar(&o.key, "key", "", "")
	fs.StringVar(&o.log, "log", "", "")
	fs.StringVar(&o.listen, "listen", ":443", "")
	fs.BoolVar(&o.version, "version", false, "")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if !o.version && (o.site == "" || o.certs == "" || fs.NArg() > 0) {
		return o, errors.New("--site DIR and --certs DIR are required")
	}
	if (o.cert == "") != (o.key == "") {
		return o, errors.New("--cert FILE and --key FILE go together")
	}
	return o, nil
}

func replayMain(args []string) int {
	o, err := parseReplay(args)
	if err != nil {
		fmt.Fprintf(os.Stderr, "usage: quicgo_replay --site DIR --certs DIR [--cert FILE --key FILE] [--log FILE] [--listen ADDR] (%v)\n", err)
		return 2
	}
	if o.version {
		fmt.Printf("quicgo_replay %s (%s)\n", toolVersion, library())
		return 0
	}
	if err := serveReplay(o); err != nil {
		fmt.Fprintln(os.Stderr, "quicgo_replay: "+err.Error())
		return 1
	}
	return 0
}

func serveReplay(o replayOptions) error {
	m, err := loadSite(o.site)
	if err != nil {
		return err
	}
	var fallback *tls.Certificate
	if o.cert != "" {
		cert, err := tls.LoadX509KeyPair(o.cert, o.key)
		if err != nil {
			return fmt.Errorf("--cert/--key: %w", err)
		}
		fallback = &cert
	}
	getCert, err := certificates(o.certs, m, fallback)
	if err != nil {
		return err
	}
	logOut := io.Writer(os.Stdout)
	if o.log != "" {
		f, err := os.OpenFile(o.log, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
		if err != nil {
			return err
		}
		defer f.Close()
		logOut = f
	}
	handler := newReplayServer(o.site, m, logOut)
	tlsConf := &tls.Config{GetCertificate: getCert, MinVersion: tls.VersionTLS12}
	tcp, err := net.Listen("tcp", o.listen)
	if err != nil {
		return err
	}
	udp, err := net.ListenPacket("udp", o.listen)
	if err != nil {
		return err
	}
	h2 := &http.Server{
		Handler: handler, TLSConfig: tlsConf.Clone(), ReadHeaderTimeout: 10 * time.Second,
		ConnContext: func(ctx context.Context, _ net.Conn) context.Context {
			return context.WithValue(ctx, connKey{}, handler.conns.Add(1))
		},
	}
	h3 := &http3.Server{
		Handler: handler, TLSConfig: http3.ConfigureTLSConfig(tlsConf.Clone()),
		QUICConfig: &quic.Config{Allow0RTT: false},
		ConnContext: func(ctx context.Context, _ *quic.Conn) context.Context {
			return context.WithValue(ctx, connKey{}, handler.conns.Add(1))
		},
	}
	errs := make(chan error, 2)
	go func() { errs <- h2.ServeTLS(tcp, "", "") }()
	go func() { errs <- h3.Serve(udp) }()
	fmt.Fprintf(os.Stderr, "quicgo_replay: %d origins, %d responses on %s (h2, h3)\n", len(m.Sites), len(m.Responses), o.listen)
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	select {
	case err = <-errs:
	case <-stop:
	}
	_ = h3.Close()
	_ = h2.Close()
	return err
}
