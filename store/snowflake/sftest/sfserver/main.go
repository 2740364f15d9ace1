// Command sfserver runs the sftest Snowflake-protocol server (DuckDB inside)
// on a loopback address and prints a DSN any gosnowflake client can use.
//
//	go run ./store/snowflake/sftest/sfserver -addr 127.0.0.1:8089
package main

import (
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"syscall"

	"github.com/dvtrun/dvtrun/store/snowflake/sftest"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:8089", "listen address (loopback)")
	db := flag.String("database", "DVT", "database name put in the printed DSN")
	schema := flag.String("schema", "PUBLIC", "schema name put in the printed DSN")
	path := flag.String("path", "", "DuckDB file (default: in-memory)")
	verbose := flag.Bool("v", false, "log every login and statement")
	rtt := flag.Duration("rtt", 0, "delay every HTTP request by this much, like the network to a real account (e.g. 100ms)")
	flag.Parse()

	opts := sftest.Options{Path: *path, RTT: *rtt}
	if *verbose {
		opts.Logf = log.Printf
	}
	srv, err := sftest.New(opts)
	if err != nil {
		log.Fatalf("sfserver: %v", err)
	}
	if err := srv.Start(*addr); err != nil {
		log.Fatalf("sfserver: %v", err)
	}
	fmt.Println(srv.DSN(*db, *schema))

	stop := make(chan os.Signal, 1)
	signal.Notify(stop, os.Interrupt, syscall.SIGTERM)
	<-stop
	if err := srv.Close(); err != nil {
		log.Fatalf("sfserver: close: %v", err)
	}
}
