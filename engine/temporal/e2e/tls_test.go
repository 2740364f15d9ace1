package e2e

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// testCA is a certificate authority made in the test.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

func newCA(t *testing.T, name string) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return &testCA{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// issue signs a leaf certificate: a server's for dnsName, or a client's.
func (ca *testCA) issue(t *testing.T, cn, dnsName string, server bool) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial, _ := rand.Int(rand.Reader, big.NewInt(1<<62))
	tmpl := &x509.Certificate{SerialNumber: serial, Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour), KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	if server {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		tmpl.DNSNames = []string{dnsName}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kd, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kd})
}

// serverTLS is the TLS config of a frontend named temporal.test with a
// certificate of ca; clients, when given, must present a certificate of
// that CA (mTLS).
func serverTLS(t *testing.T, ca *testCA, clients *testCA) *tls.Config {
	t.Helper()
	certPEM, keyPEM := ca.issue(t, "temporal.test", "temporal.test", true)
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	cfg := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12, NextProtos: []string{"h2"}}
	if clients != nil {
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
		cfg.ClientCAs = x509.NewCertPool()
		cfg.ClientCAs.AddCert(clients.cert)
	}
	return cfg
}

// tlsProxy terminates TLS (cfg) and forwards the bytes to backend, the
// test server's plain gRPC frontend: the client's gRPC runs over TLS to the
// proxy as it would to a secured frontend.
func tlsProxy(t *testing.T, cfg *tls.Config, backend string) string {
	t.Helper()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Go(func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				defer conn.Close()
				// The handshake, with its client certificate check, first:
				// a refused client never reaches the backend.
				if err := conn.(*tls.Conn).Handshake(); err != nil {
					return
				}
				up, err := net.Dial("tcp", backend)
				if err != nil {
					return
				}
				defer up.Close()
				done := make(chan struct{}, 2)
				go func() { _, _ = io.Copy(up, conn); done <- struct{}{} }()
				go func() { _, _ = io.Copy(conn, up); done <- struct{}{} }()
				<-done
			})
		}
	})
	return ln.Addr().String()
}

// rawCodec passes gRPC messages through undecoded.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) { return *(v.(*[]byte)), nil }
func (rawCodec) Unmarshal(data []byte, v any) error {
	*(v.(*[]byte)) = append([]byte(nil), data...)
	return nil
}
func (rawCodec) Name() string { return "proto" }

// keyProxy is a gRPC server over TLS (cfg) that forwards every call to
// backend only when it carries `authorization: Bearer key`, as Temporal
// Cloud checks API keys; it records each authorization it saw.
type keyProxy struct {
	mu   sync.Mutex
	seen []string
}

func (p *keyProxy) authorizations() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.seen...)
}

func startKeyProxy(t *testing.T, cfg *tls.Config, backend, key string) (*keyProxy, string) {
	t.Helper()
	up, err := grpc.NewClient(backend, grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithDefaultCallOptions(grpc.ForceCodec(rawCodec{})))
	if err != nil {
		t.Fatal(err)
	}
	p := &keyProxy{}
	// Every WorkflowService method is unary: one message in, one out.
	handler := func(_ any, ss grpc.ServerStream) error {
		method, _ := grpc.MethodFromServerStream(ss)
		md, _ := metadata.FromIncomingContext(ss.Context())
		auth := md.Get("authorization")
		p.mu.Lock()
		p.seen = append(p.seen, strings.Join(auth, ","))
		p.mu.Unlock()
		if len(auth) != 1 || auth[0] != "Bearer "+key {
			return status.Error(codes.Unauthenticated, "the request has no valid API key")
		}
		var in []byte
		if err := ss.RecvMsg(&in); err != nil {
			return err
		}
		out := md.Copy()
		out.Delete("authorization")
		var reply []byte
		if err := up.Invoke(metadata.NewOutgoingContext(ss.Context(), out), method, &in, &reply); err != nil {
			return err
		}
		return ss.SendMsg(&reply)
	}
	srv := grpc.NewServer(grpc.Creds(credentials.NewTLS(cfg)), grpc.UnknownServiceHandler(handler), grpc.ForceServerCodec(rawCodec{}))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { srv.Stop(); up.Close() })
	return p, ln.Addr().String()
}

// TestSecuredTemporal runs `dvtrun run --engine temporal` against the real
// server behind TLS: with mTLS (a TLS-terminating TCP proxy in front of the
// test server, client certificates required and checked against a CA
// made here) and with an API key (a gRPC proxy over TLS that forwards only
// calls carrying `authorization: Bearer KEY`, as Temporal Cloud does). The
// right certificate or key completes the run; none, one from another CA,
// or a wrong key fails within the dial's bound, with the TLS or
// authentication error.
func TestSecuredTemporal(t *testing.T) {
	bin := buildDvtrun(t)
	ts := newServer(t)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "tick.yaml"), []byte(tickPlan), 0o644); err != nil {
		t.Fatal(err)
	}
	ca, clientCA, otherCA := newCA(t, "dvtrun test server CA"), newCA(t, "dvtrun test client CA"), newCA(t, "someone else's CA")
	write := func(name string, data []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	write("ca.pem", ca.pem)
	c, k := clientCA.issue(t, "dvtrun-worker", "", false)
	write("client.pem", c)
	write("client.key", k)
	c, k = otherCA.issue(t, "intruder", "", false)
	write("other.pem", c)
	write("other.key", k)
	apiKey := fmt.Sprintf("tmprl-test-key-%d", time.Now().UnixNano())
	write("api.key", []byte(apiKey+"\n"))

	mtls := tlsProxy(t, serverTLS(t, ca, clientCA), ts.GetFrontendHostPort())
	keys, keyAddr := startKeyProxy(t, serverTLS(t, ca, nil), ts.GetFrontendHostPort(), apiKey)

	dvt := func(t *testing.T, block string, env ...string) (string, error) {
		t.Helper()
		cfgFile := write("dvtrun.yaml", []byte(fmt.Sprintf("temporal: {namespace: %q, taskQueue: %s, %s}\n", ts.GetDefaultNamespace(), strings.ReplaceAll(t.Name(), "/", "-"), block)))
		// Bounded: a refused handshake must fail the command, not hang it.
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, bin, "--store", "sqlite:"+filepath.Join(dir, "state.db"), "--warehouse", "sqlite:"+filepath.Join(dir, "wh.db"),
			"--config", cfgFile, "run", "--engine", "temporal", "tick.yaml")
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), env...)
		out, err := cmd.CombinedOutput()
		if ctx.Err() != nil {
			t.Fatalf("dvtrun run did not end within 90s:\n%s", out)
		}
		return string(out), err
	}
	ok := func(t *testing.T, out string, err error) {
		t.Helper()
		if err != nil || !strings.Contains(out, "COMPLETED") {
			t.Fatalf("run: %v\n%s", err, out)
		}
	}
	refused := func(t *testing.T, out string, err error, want ...string) {
		t.Helper()
		if err == nil {
			t.Fatalf("the run passed:\n%s", out)
		}
		if !strings.Contains(out, "STORE_UNAVAILABLE: cannot reach the Temporal frontend at ") {
			t.Errorf("output without the dial error:\n%s", out)
		}
		if strings.Contains(out, "Running plan") {
			t.Errorf("a run was recorded although Temporal refused the connection:\n%s", out)
		}
		for _, w := range want {
			if !strings.Contains(out, w) {
				t.Errorf("output without %q:\n%s", w, out)
			}
		}
	}
	server := fmt.Sprintf("address: %q, tls: {caFile: ca.pem, serverName: temporal.test", mtls)
	t.Run("mtls", func(t *testing.T) {
		out, err := dvt(t, server+", certFile: client.pem, keyFile: client.key}")
		ok(t, out, err)
	})
	t.Run("no client certificate", func(t *testing.T) {
		out, err := dvt(t, server+"}")
		refused(t, out, err, "over TLS, which the server ended: it may require a client certificate")
	})
	t.Run("certificate of another CA", func(t *testing.T) {
		out, err := dvt(t, server+", certFile: other.pem, keyFile: other.key}")
		refused(t, out, err, "over TLS, which the server ended: it may require a client certificate")
	})
	t.Run("server name not the certificate's", func(t *testing.T) {
		out, err := dvt(t, fmt.Sprintf("address: %q, tls: {caFile: ca.pem, certFile: client.pem, keyFile: client.key}", mtls))
		refused(t, out, err, "tls: failed to verify certificate")
	})

	keyServer := fmt.Sprintf("address: %q, tls: {caFile: ca.pem, serverName: temporal.test}", keyAddr)
	t.Run("api key from a variable", func(t *testing.T) {
		out, err := dvt(t, keyServer+", apiKeyEnv: TEMPORAL_TEST_KEY", "TEMPORAL_TEST_KEY="+apiKey)
		ok(t, out, err)
		seen := keys.authorizations()
		if len(seen) == 0 {
			t.Fatal("no call reached the proxy")
		}
		for _, a := range seen {
			if a != "Bearer "+apiKey {
				t.Fatalf("a call carried authorization %q, want Bearer and the key", a)
			}
		}
	})
	t.Run("api key from a file", func(t *testing.T) {
		out, err := dvt(t, keyServer+", apiKeyFile: api.key")
		ok(t, out, err)
	})
	t.Run("wrong api key", func(t *testing.T) {
		out, err := dvt(t, keyServer+", apiKeyEnv: TEMPORAL_TEST_KEY", "TEMPORAL_TEST_KEY=not-the-key")
		refused(t, out, err, "Unauthenticated", "no valid API key")
		if strings.Contains(out, "not-the-key") {
			t.Errorf("the API key was printed:\n%s", out)
		}
	})
}
