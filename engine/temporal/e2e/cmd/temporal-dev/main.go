// Command temporal-dev serves an in-process Temporal server (the one the
// e2e tests use, on SQLite in memory) on 127.0.0.1:7233 with a `default`
// namespace until interrupted, for trying `dvtrun --engine temporal` by
// hand: `make temporal-dev`.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/server/temporaltest"
	"google.golang.org/protobuf/types/known/durationpb"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:7233", "serve the frontend on `ADDR`")
	ns := flag.String("namespace", "default", "register namespace `NS`")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "Usage: temporal-dev [--addr ADDR] [--namespace NS]\n\nServe an in-process Temporal server (state in memory) until interrupted.\n\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	if err := serve(*addr, *ns); err != nil {
		fmt.Fprintln(os.Stderr, "temporal-dev:", err)
		os.Exit(1)
	}
}

func serve(addr, ns string) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// Listen first: a port in use fails before the server starts.
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	defer ln.Close()
	ts := temporaltest.NewServer()
	defer ts.Stop()
	front := ts.GetFrontendHostPort()
	nc, err := client.NewNamespaceClient(client.Options{HostPort: front})
	if err != nil {
		return err
	}
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	err = nc.Register(rctx, &workflowservice.RegisterNamespaceRequest{Namespace: ns, WorkflowExecutionRetentionPeriod: durationpb.New(24 * time.Hour)})
	cancel()
	nc.Close()
	var exists *serviceerror.NamespaceAlreadyExists
	if err != nil && !errors.As(err, &exists) {
		return fmt.Errorf("registering namespace %s: %w", ns, err)
	}
	fmt.Printf("Temporal server on %s (namespace %s); interrupt to stop\n", addr, ns)
	// The test server picks its own port: forward addr to it.
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go forward(conn, front)
		}
	}()
	<-ctx.Done()
	return nil
}

func forward(in net.Conn, to string) {
	defer in.Close()
	out, err := net.DialTimeout("tcp", to, 5*time.Second)
	if err != nil {
		return
	}
	defer out.Close()
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(out, in); done <- struct{}{} }()
	go func() { _, _ = io.Copy(in, out); done <- struct{}{} }()
	<-done
}
