package postgres

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/dvtrun/dvtrun/engine/wake"
)

// Wake-ups (issue 18): triggers of migration 0600 NOTIFY, at commit, the
// channel dvt_queue with the id of each request that became claimable and
// dvt_events with the id of each run whose log grew (Postgres sends one
// notification per distinct payload per transaction; ids stay far below
// the 8,000-byte payload limit). One dedicated connection per process
// LISTENs to both and fans them out to the services that subscribed
// (wake.Source); they keep polling, so a lost notification only costs a
// poll interval.

// channelTopics maps the NOTIFY channels onto wake topics.
var channelTopics = map[string]wake.Topic{"dvt_queue": wake.Queue, "dvt_events": wake.Events}

// listenSQL subscribes the listening connection to channelTopics' channels.
const listenSQL = "LISTEN dvt_queue; LISTEN dvt_events"

const (
	// listenConnectTimeout bounds one attempt to open the listening
	// connection.
	listenConnectTimeout = 10 * time.Second
	// listenPing is how long the connection may stay silent before a ping
	// checks that it is alive (a dead server sends no error).
	listenPing = 30 * time.Second
	// listenRetryMax caps the pause between reconnection attempts.
	listenRetryMax = 5 * time.Second
)

// listener owns the LISTEN connection; it opens it when the first service
// subscribes and closes it with the store.
type listener struct {
	wake.Hub
	cfg *pgx.ConnConfig
	log *slog.Logger

	mu        sync.Mutex
	stop      context.CancelFunc
	done      chan struct{}
	closed    bool          // the store is closed: no connection opens
	connected chan struct{} // closed once the first LISTEN is in place
}

func newListener(cfg *pgx.ConnConfig, log *slog.Logger) *listener {
	l := &listener{cfg: cfg, log: log, connected: make(chan struct{})}
	l.OnFirstSubscribe(l.start)
	return l
}

// Wakeups returns the store's wake-up source, nil in poll-only mode
// (Options.PollOnly, or dvtrun_wakeups=poll in the DSN: for connection
// poolers in transaction mode, which do not keep a session's LISTEN).
func (s *Store) Wakeups() wake.Source {
	if s.wake == nil {
		return nil
	}
	return s.wake
}

func (l *listener) start() {
	ctx, cancel := context.WithCancel(context.Background())
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		cancel()
		return
	}
	l.stop, l.done = cancel, make(chan struct{})
	l.mu.Unlock()
	go func() {
		defer close(l.done)
		l.run(ctx)
	}()
}

// close stops the listening connection, if it was opened, and waits for it.
func (l *listener) close() {
	l.mu.Lock()
	stop, done := l.stop, l.done
	l.closed = true
	l.mu.Unlock()
	if stop != nil {
		stop()
		<-done
	}
}

// run keeps a LISTEN connection open until ctx ends: after a failure it
// reconnects with a doubling pause (at most listenRetryMax), logging each
// loss, and wakes every subscriber once it is back, since notifications
// sent meanwhile are lost.
func (l *listener) run(ctx context.Context) {
	pause := 100 * time.Millisecond
	for first := true; ; first = false {
		err := l.listen(ctx, !first, func() { pause = 100 * time.Millisecond })
		if ctx.Err() != nil {
			return
		}
		l.log.Warn("postgres wake-up connection lost; services poll until it is back", "error", err.Error(), "retry_in", pause.String())
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		pause = min(2*pause, listenRetryMax)
	}
}

// listen connects, LISTENs and publishes notifications until the
// connection fails. ok runs once the LISTENs are in place.
func (l *listener) listen(ctx context.Context, reconnect bool, ok func()) error {
	cctx, cancel := context.WithTimeout(ctx, listenConnectTimeout)
	conn, err := pgx.ConnectConfig(cctx, l.cfg)
	cancel()
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	// One statement (fixed text): both channels are listened to once it
	// returns.
	if _, err := conn.Exec(ctx, listenSQL); err != nil {
		return err
	}
	ok()
	select {
	case <-l.connected:
	default:
		close(l.connected)
	}
	if reconnect {
		l.log.Info("postgres wake-up connection is back")
		l.PublishAll()
	}
	for {
		wctx, cancel := context.WithTimeout(ctx, listenPing)
		n, err := conn.WaitForNotification(wctx)
		cancel()
		switch {
		case err == nil:
			if t, ok := channelTopics[n.Channel]; ok {
				l.Publish(t, n.Payload)
			}
		case ctx.Err() != nil:
			return ctx.Err()
		case errors.Is(err, context.DeadlineExceeded):
			pctx, cancel := context.WithTimeout(ctx, listenConnectTimeout)
			err = conn.Ping(pctx)
			cancel()
			if err != nil {
				return err
			}
		default:
			return err
		}
	}
}
