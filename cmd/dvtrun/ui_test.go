package main

import (
	"context"
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
		{"/runs/" + runID, "Bearer " + token, 200, "successful steps committed exactly once"},
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
