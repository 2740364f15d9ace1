package sftest

import (
	"net"
	"sync"
	"testing"
)

// Unreachable returns two addresses a Snowflake client cannot log in at:
// a port that refuses connections, and one that accepts TCP but never
// answers (its connections are held unread until the test ends).
func Unreachable(t testing.TB) (refused, silent string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refused = ln.Addr().String()
	ln.Close()
	quiet, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var held []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := quiet.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			held = append(held, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		quiet.Close()
		<-done
		mu.Lock()
		defer mu.Unlock()
		for _, c := range held {
			c.Close()
		}
	})
	return refused, quiet.Addr().String()
}
