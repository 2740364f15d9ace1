package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// getAuth is get with an Authorization header.
func getAuth(url, auth string) (int, string) {
	req, _ := http.NewRequest("GET", url, nil)
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, ""
	}
	defer res.Body.Close()
	var b strings.Builder
	buf := make([]byte, 4096)
	for {
		n, err := res.Body.Read(buf)
		b.Write(buf[:n])
		if err != nil {
			break
		}
	}
	return res.StatusCode, b.String()
}

// waitServing polls url until it answers at all, for at most 30s.
func waitServing(t *testing.T, url string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if code, _ := getAuth(url, ""); code != 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("nothing serves %s after 30s", url)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestUIServesTheConsole: `dvtrun ui` serves the store's runs behind the
// bearer token its variable holds, prints its URL and never the token; a
// token variable that is unset refuses to start.
func TestUIServesTheConsole(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	r := h.run("run", fixture("ok", "plan.yaml"))
	if r.code != 0 {
		t.Fatalf("run: %+v", r)
	}
	runID := strings.Fields(r.stdout[strings.LastIndex(r.stdout, "Run "):])[1]
	const token = "console-s3cret"
	h.env["DVT_UI_TOKEN"] = token
	addr := freeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan result, 1)
	go func() { done <- h.runCtx(ctx, "ui", "--listen", addr, "--ui-token-env", "DVT_UI_TOKEN") }()
	base := "http://" + addr
	waitServing(t, base+"/runs")
	for _, c := range []struct {
		path, auth string
		status     int
		want       string
	}{
		{"/runs", "", 401, "Sign in"},
		{"/runs", "Bearer nope", 401, "Sign in"},
		{"/runs", "Bearer " + token, 200, runID},
		{"/runs/" + runID, "Bearer " + token, 200, `id="dag"`},
		{"/runs/" + runID, "Bearer " + token, 200, "✓ verified"},
		{"/runs/" + runID + "/steps/model.stg_customers", "Bearer " + token, 200, "attempt 1 committed at"},
		{"/runs/" + runID, "Bearer " + token, 200, "successful steps have a ledger entry, so their changes to the warehouse were committed exactly once"},
		{"/runs/no-such-run", "Bearer " + token, 404, "not found"},
		{"/workers", "Bearer " + token, 200, "Workers"},
	} {
		code, body := getAuth(base+c.path, c.auth)
		if code != c.status || !strings.Contains(body, c.want) {
			t.Errorf("GET %s (%q): %d, want %d with %q", c.path, c.auth, code, c.status, c.want)
		}
		if strings.Contains(body, token) {
			t.Errorf("GET %s shows the token", c.path)
		}
	}
	cancel()
	r = <-done
	if r.code != 0 || !strings.Contains(r.stdout, "dvtrun console: http://"+addr+"/runs") {
		t.Fatalf("ui: %+v", r)
	}
	if strings.Contains(r.stdout+r.stderr, token) {
		t.Fatal("ui printed the token")
	}

	wantError(t, h.run("ui", "--listen", freeAddr(t), "--ui-token-env", "DVT_UNSET"), 2, "CONFIG_INVALID", "DVT_UNSET")
	h.env["DVT_UI_BASIC"] = "no-colon"
	wantError(t, h.run("ui", "--listen", freeAddr(t), "--ui-basic-auth-env", "DVT_UI_BASIC"), 2, "CONFIG_INVALID", "USER:PASSWORD")
	wantError(t, h.run("serve", "--ui"), 2, "INVALID_ARGUMENT", "--http")
}

// TestServeUI: serve --ui serves the console beside /metrics.
func TestServeUI(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	if r := h.run("run", fixture("ok", "plan.yaml")); r.code != 0 {
		t.Fatalf("run: %+v", r)
	}
	addr := freeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan result, 1)
	go func() { done <- h.runCtx(ctx, "serve", "--poll", "100ms", "--http", addr, "--ui") }()
	waitServing(t, "http://"+addr+"/livez")
	if code, body := getAuth("http://"+addr+"/runs", ""); code != 200 || !strings.Contains(body, "COMPLETED") {
		t.Errorf("/runs on serve --ui: %d", code)
	}
	if code, body := getAuth("http://"+addr+"/metrics", ""); code != 200 || !strings.Contains(body, "dvtrun_") {
		t.Errorf("/metrics beside the console: %d", code)
	}
	cancel()
	if r := <-done; r.code != 0 || !strings.Contains(r.stderr, `"msg":"console"`) {
		t.Fatalf("serve: %+v", r)
	}
}

// TestConsoleRefusesBlankSecrets: a token or basic-auth variable that is
// set but blank after trimming would open the console to a blank
// credential; it is CONFIG_INVALID (exit 2) naming the key that named it.
func TestConsoleRefusesBlankSecrets(t *testing.T) {
	cases := []struct {
		name, config string
		flags        []string
		value        string
		want         []string
	}{
		{"token flag, spaces", "", []string{"--ui-token-env", "DVT_UI_SECRET"}, "   ", []string{"--ui-token-env", "DVT_UI_SECRET", "only blanks"}},
		{"token flag, newline and tab", "", []string{"--ui-token-env", "DVT_UI_SECRET"}, "\n\t", []string{"--ui-token-env", "DVT_UI_SECRET"}},
		{"token flag, empty", "", []string{"--ui-token-env", "DVT_UI_SECRET"}, "", []string{"--ui-token-env", "DVT_UI_SECRET"}},
		{"token config key, spaces", "console: {tokenEnv: DVT_UI_SECRET}\n", nil, "  ", []string{"console.tokenEnv", "DVT_UI_SECRET"}},
		{"basic config key, blank password", "console: {basicAuthEnv: DVT_UI_SECRET}\n", nil, "ops:  ", []string{"console.basicAuthEnv", "DVT_UI_SECRET"}},
		{"basic flag, blank user", "", []string{"--ui-basic-auth-env", "DVT_UI_SECRET"}, " :pw", []string{"--ui-basic-auth-env", "DVT_UI_SECRET"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := newHarness(t)
			h.env["DVT_UI_SECRET"] = c.value
			args := []string{}
			if c.config != "" {
				args = append(args, "--config", h.writeConfig(c.config))
			}
			args = append(args, "ui", "--listen", "127.0.0.1:0")
			wantError(t, h.run(append(args, c.flags...)...), 2, "CONFIG_INVALID", c.want...)
		})
	}
}

// TestHTTPServerBounds: the console's and /metrics' server closes an idle
// keep-alive connection after its idle bound, and a connection that sends
// no request headers after its header bound (both shortened here), instead
// of holding them (a connection once stayed open 40s after its 401).
func TestHTTPServerBounds(t *testing.T) {
	defer func(h, i time.Duration) { httpHeaderTimeout, httpIdleTimeout = h, i }(httpHeaderTimeout, httpIdleTimeout)
	httpHeaderTimeout, httpIdleTimeout = 200*time.Millisecond, 200*time.Millisecond
	c := &cli{stdout: io.Discard, stderr: io.Discard, rawStderr: io.Discard}
	addr := freeAddr(t)
	srv, err := c.serveHTTP(addr, &metrics{}, func() bool { return true }, nil, false, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	if srv.IdleTimeout != httpIdleTimeout || srv.ReadHeaderTimeout != httpHeaderTimeout {
		t.Fatalf("server bounds: idle %s, header %s", srv.IdleTimeout, srv.ReadHeaderTimeout)
	}
	closedWithin := func(conn net.Conn, what string) {
		t.Helper()
		// Far longer than the bound, far shorter than a default server
		// would keep the connection: the server, not this deadline, ends it.
		_ = conn.SetReadDeadline(time.Now().Add(20 * time.Second))
		if _, err := io.Copy(io.Discard, conn); err != nil {
			t.Fatalf("%s: the connection was not closed by the server: %v", what, err)
		}
	}
	// Idle after a complete keep-alive exchange.
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "GET /livez HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
	res, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil || res.StatusCode != 200 || res.Close {
		t.Fatalf("livez: %v %+v", err, res)
	}
	closedWithin(conn, "idle keep-alive")
	// Silent after connecting.
	silent, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	fmt.Fprintf(silent, "GET /livez HTTP/1.1\r\n") // and never the rest
	closedWithin(silent, "headers never finished")
}

// TestOpenConsoleWarns: a console served beyond loopback without
// authentication says so (the console, not only /metrics), by `ui`,
// `serve --ui` and `worker --ui`; and it still refuses a rebound Host.
func TestOpenConsoleWarns(t *testing.T) {
	h := newHarness(t)
	if r := h.run("run", fixture("ok", "plan.yaml")); r.code != 0 {
		t.Fatalf("run: %+v", r)
	}
	for _, args := range [][]string{{"ui", "--listen"}, {"serve", "--poll", "100ms", "--ui", "--http"}, {"worker", "--poll", "100ms", "--ui", "--http"}} {
		t.Run(args[0], func(t *testing.T) {
			port := freeAddr(t)[len("127.0.0.1:"):]
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			done := make(chan result, 1)
			go func() { done <- h.runCtx(ctx, append(args, "0.0.0.0:"+port)...) }()
			base := "http://127.0.0.1:" + port
			waitServing(t, base+"/runs")
			req, _ := http.NewRequest("GET", base+"/runs", nil)
			req.Host = "rebound.attacker.example"
			res, err := http.DefaultClient.Do(req)
			if err != nil || res.StatusCode != http.StatusMisdirectedRequest {
				t.Errorf("GET /runs with a rebound Host: %v %v", res, err)
			}
			if code, _ := getAuth(base+"/runs", ""); code != 200 {
				t.Errorf("GET /runs by IP: %d", code)
			}
			cancel()
			r := <-done
			if r.code != 0 || !strings.Contains(r.stderr, "without authentication: anyone who reaches it can read every run") {
				t.Fatalf("%s on 0.0.0.0 without auth gave no console warning: %+v", args[0], r)
			}
		})
	}
}
