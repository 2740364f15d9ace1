package sftest

import (
	"net"
	"sync"
	"testing"
)

// Silent is a port that accepts TCP connections and never answers on
// them: a host a Snowflake client can reach but not log in at.
type Silent struct {
	Addr string // host:port

	mu   sync.Mutex
	held []net.Conn
}

// Accepted is how many connections the port has taken so far: one, once a
// client is inside its login.
func (s *Silent) Accepted() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.held)
}

// Unreachable returns two places a Snowflake client cannot log in at: a
// port that refuses connections, and a Silent one (its connections are
// held unread until the test ends).
func Unreachable(t testing.TB) (refused string, silent *Silent) {
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
	silent = &Silent{Addr: quiet.Addr().String()}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := quiet.Accept()
			if err != nil {
				return
			}
			silent.mu.Lock()
			silent.held = append(silent.held, c)
			silent.mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		quiet.Close()
		<-done
		silent.mu.Lock()
		defer silent.mu.Unlock()
		for _, c := range silent.held {
			c.Close()
		}
	})
	return refused, silent
}
