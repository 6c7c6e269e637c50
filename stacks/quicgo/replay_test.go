package main

// quicgo_replay on loopback: two origins, each with its own certificate, over HTTP/2 and
// HTTP/3; the recorded status, headers and body; the think time kept; what the record does
// not hold is a 404; a site whose record names a path outside bodies/ is refused.

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"
)

var origins = []string{"www.page.example", "cdn.assets.example"}

const thinkMs = 60

// The testbed's own server name, whose certificate (--cert/--key) answers every name that is
// not an origin's.
const testbedName = "server.quicbed"

// writeCA: a CA and one certificate per origin, and one for the testbed's own name, in dir
// (NAME.pem, NAME.key); the CA's pool.
func writeCA(t testing.TB, dir string) *x509.CertPool {
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"}, IsCA: true,
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	for i, name := range append([]string{testbedName}, origins...) {
		key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(int64(i + 2)), Subject: pkix.Name{CommonName: name}, DNSNames: []string{name},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
			ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		keyDER, _ := x509.MarshalECPrivateKey(key)
		write(t, filepath.Join(dir, name+".pem"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
		write(t, filepath.Join(dir, name+".key"), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}))
	}
	return pool
}

func write(t testing.TB, path string, data []byte) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

// writeSite: replay.json and bodies/ as workloads/replay.py writes them.
func writeSite(t testing.TB, dir string, body []byte) {
	sum := sha256.Sum256(body)
	name := hex.EncodeToString(sum[:])
	write(t, filepath.Join(dir, "bodies", name), body)
	m := replayManifest{
		Format: replayFormat, Page: "test.har",
		Sites: []replaySite{{origins[0], 443, "https", "10.77.2.50"}, {origins[1], 443, "https", "10.77.2.51"}},
		Responses: []replayResponse{
			{Entry: 0, Site: 0, Method: "GET", Target: "/", Status: 200, Headers: [][2]string{{"content-type", "text/html"}}, BodyBytes: int64(len(body)), Body: name},
			{Entry: 1, Site: 1, Method: "GET", Target: "/app.js?v=2", Status: 200, Headers: [][2]string{{"content-type", "text/javascript"}, {"cache-control", "max-age=60"}}, BodyBytes: int64(len(body)), WaitMs: thinkMs, Body: name},
			{Entry: 2, Site: 0, Method: "GET", Target: "/old", Status: 301, Headers: [][2]string{{"location", "/"}}},
		},
	}
	data, _ := json.Marshal(m)
	write(t, filepath.Join(dir, "replay.json"), data)
}

func freePort(t testing.TB) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

type served struct {
	addr string
	pool *x509.CertPool
	log  string
	body []byte
}

func startReplay(t testing.TB) served {
	dir := t.TempDir()
	pool := writeCA(t, filepath.Join(dir, "certs"))
	body := bytes.Repeat([]byte("recorded "), 20000)
	writeSite(t, filepath.Join(dir, "site"), body)
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	certs := filepath.Join(dir, "certs")
	o := replayOptions{
		site: filepath.Join(dir, "site"), certs: certs, log: filepath.Join(dir, "access.log"), listen: addr,
		cert: filepath.Join(certs, testbedName+".pem"), key: filepath.Join(certs, testbedName+".key"),
	}
	go func() { _ = serveReplay(o) }()
	time.Sleep(300 * time.Millisecond)
	return served{addr, pool, o.log, body}
}

// clients: HTTP/2 and HTTP/3 that reach every origin's name at the server's loopback address.
func clients(s served) map[string]*http.Client {
	dial := func(network, _ string) (net.Conn, error) { return net.Dial(network, s.addr) }
	h2 := &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: s.pool}, ForceAttemptHTTP2: true,
		DialTLS: func(network, addr string) (net.Conn, error) {
			raw, err := dial(network, addr)
			if err != nil {
				return nil, err
			}
			host, _, _ := net.SplitHostPort(addr)
			conn := tls.Client(raw, &tls.Config{RootCAs: s.pool, ServerName: host, NextProtos: []string{"h2"}})
			return conn, conn.Handshake()
		},
	}
	h3 := &http3.Transport{
		TLSClientConfig: &tls.Config{RootCAs: s.pool},
		Dial: func(ctx context.Context, _ string, tlsCfg *tls.Config, cfg *quic.Config) (*quic.Conn, error) {
			return quic.DialAddr(ctx, s.addr, tlsCfg, cfg) // the name's SNI, the server's address
		},
	}
	return map[string]*http.Client{"h2": {Transport: h2, Timeout: 10 * time.Second}, "h3": {Transport: h3, Timeout: 10 * time.Second}}
}

func TestBothProtocolsServeEachOriginAsRecorded(t *testing.T) {
	s := startReplay(t)
	for proto, c := range clients(s) {
		t.Run(proto, func(t *testing.T) {
			start := time.Now()
			resp, err := c.Get("https://cdn.assets.example/app.js?v=2")
			if err != nil {
				t.Fatal(err)
			}
			got, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			elapsed := time.Since(start)
			if resp.StatusCode != 200 || !bytes.Equal(got, s.body) {
				t.Fatalf("status %d, %d bytes", resp.StatusCode, len(got))
			}
			if resp.Header.Get("cache-control") != "max-age=60" || resp.Header.Get("content-type") != "text/javascript" {
				t.Fatalf("headers %v", resp.Header)
			}
			if elapsed < thinkMs*time.Millisecond {
				t.Fatalf("answered after %v, before the think time of %d ms", elapsed, thinkMs)
			}
			if want := map[string]int{"h2": 2, "h3": 3}[proto]; resp.ProtoMajor != want {
				t.Fatalf("protocol %s", resp.Proto)
			}
			if resp.TLS == nil || resp.TLS.PeerCertificates[0].DNSNames[0] != "cdn.assets.example" {
				t.Fatal("not the origin's own certificate")
			}
			for target, status := range map[string]int{"/app.js?v=2": 404, "/missing": 404, "/old": 301} {
				r, err := (&http.Client{Transport: c.Transport, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}).Get("https://www.page.example" + target)
				if err != nil {
					t.Fatal(err)
				}
				r.Body.Close()
				if r.StatusCode != status {
					t.Fatalf("%s: %d, want %d", target, r.StatusCode, status)
				}
			}
		})
	}
	log, _ := os.ReadFile(s.log)
	lines := strings.Split(strings.TrimSpace(string(log)), "\n")
	var first logLine
	if err := json.Unmarshal([]byte(lines[0]), &first); err != nil {
		t.Fatal(err)
	}
	if len(lines) != 8 || first.Entry != 1 || first.Host != "cdn.assets.example" || first.WaitMs != thinkMs || first.TLS != "TLSv1.3" {
		t.Fatalf("log: %d lines, first %+v", len(lines), first)
	}
}

func TestAnyOtherNameGetsTheTestbedsOwnCertificate(t *testing.T) {
	s := startReplay(t)
	for proto, c := range clients(s) {
		resp, err := c.Get("https://" + testbedName + healthPath)
		if err != nil {
			t.Fatalf("%s: %v", proto, err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusNoContent || resp.TLS.PeerCertificates[0].DNSNames[0] != testbedName {
			t.Fatalf("%s: status %d from %v", proto, resp.StatusCode, resp.TLS.PeerCertificates[0].DNSNames)
		}
		// A name the page never had is given that certificate too, which does not name it.
		if _, err := c.Get("https://elsewhere.example/"); err == nil || !strings.Contains(err.Error(), "certificate") {
			t.Fatalf("%s: a name outside the page verified (%v)", proto, err)
		}
	}
	m := &replayManifest{Sites: []replaySite{}}
	getCert, err := certificates(t.TempDir(), m, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := getCert(&tls.ClientHelloInfo{ServerName: testbedName}); err == nil {
		t.Fatal("without --cert, a name outside the page got a certificate")
	}
	if _, err := parseReplay([]string{"--site", "s", "--certs", "c", "--cert", "x.pem"}); err == nil {
		t.Fatal("--cert without --key accepted")
	}
}

func TestASiteNamingAPathOutsideItsBodiesIsRefused(t *testing.T) {
	for name, mangle := range map[string]func(*replayManifest){
		"body":   func(m *replayManifest) { m.Responses[0].Body = "../../etc/shadow" },
		"site":   func(m *replayManifest) { m.Responses[0].Site = 7 },
		"name":   func(m *replayManifest) { m.Sites[0].Name = "../x" },
		"format": func(m *replayManifest) { m.Format = 2 },
	} {
		dir := t.TempDir()
		writeSite(t, dir, []byte("x"))
		var m replayManifest
		data, _ := os.ReadFile(filepath.Join(dir, "replay.json"))
		_ = json.Unmarshal(data, &m)
		mangle(&m)
		data, _ = json.Marshal(m)
		write(t, filepath.Join(dir, "replay.json"), data)
		if _, err := loadSite(dir); err == nil {
			t.Fatalf("%s: accepted", name)
		}
	}
}

// BenchmarkThinkTime: the replay server's own time beside a recorded think time, per
// protocol, on one kept connection over loopback (bench/replay_bench.py prints the table):
// ms-over-wait is a request's time less the think time, the loopback round trip included.
func BenchmarkThinkTime(b *testing.B) {
	s := startReplay(b)
	for _, proto := range []string{"h2", "h3"} {
		c := clients(s)[proto]
		for _, target := range []string{"https://www.page.example/", "https://cdn.assets.example/app.js?v=2"} {
			wait := map[bool]float64{true: thinkMs, false: 0}[strings.Contains(target, "app.js")]
			b.Run(fmt.Sprintf("%s/wait=%gms", proto, wait), func(b *testing.B) {
				over := make([]float64, 0, b.N)
				for i := 0; i < b.N; i++ {
					start := time.Now()
					resp, err := c.Get(target)
					if err != nil {
						b.Fatal(err)
					}
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					over = append(over, float64(time.Since(start).Microseconds())/1000-wait)
				}
				sort.Float64s(over)
				b.ReportMetric(over[len(over)/2], "ms-over-wait-p50")
				b.ReportMetric(over[len(over)*95/100], "ms-over-wait-p95")
			})
		}
	}
}
