package sftest

import (
	"encoding/json"
	"sync"
)

// HeldAnswer is a query request the server executed (and, outside an open
// transaction, committed) whose answer it keeps from the client.
type HeldAnswer struct {
	QueryID   string
	RequestID string
	SQLText   string
	Err       string // Snowflake error code of the answer, empty on success
}

// answerHold is one HoldAnswers call.
type answerHold struct {
	match    func(sqlText string) bool
	held     chan HeldAnswer
	released chan struct{}
	once     sync.Once
}

func (h *answerHold) release() { h.once.Do(func() { close(h.released) }) }

// answerHolds are the active holds of a server, tried in the order they
// were made.
type answerHolds struct {
	mu    sync.Mutex
	holds []*answerHold
}

// HoldAnswers keeps back the answer to every query request whose SQL text
// matches, after the server executed the request, until release is called:
// the statement's effects are committed and visible to other sessions while
// its client still waits, which is what a client sees when the network loses
// an answer or when it is killed between a request and its answer.
//
// held says, for each answer held, which request it was; a held answer waits
// until the test receives from held (or calls release) and then until
// release. release sends the held answers (a client that went away gets
// nothing) and holds no more; calling it again does nothing, and Close calls
// it. Only the synchronous answers of /queries/v1/query-request are held;
// the request stays executed once, so a resend of its requestId is answered
// at once, as Snowflake answers a requestId it has executed.
func (s *Server) HoldAnswers(match func(sqlText string) bool) (held <-chan HeldAnswer, release func()) {
	h := &answerHold{match: match, held: make(chan HeldAnswer), released: make(chan struct{})}
	s.answerHolds.mu.Lock()
	s.answerHolds.holds = append(s.answerHolds.holds, h)
	s.answerHolds.mu.Unlock()
	return h.held, func() {
		s.answerHolds.mu.Lock()
		for i, x := range s.answerHolds.holds {
			if x == h {
				s.answerHolds.holds = append(s.answerHolds.holds[:i:i], s.answerHolds.holds[i+1:]...)
				break
			}
		}
		s.answerHolds.mu.Unlock()
		h.release()
	}
}

// holdAnswer blocks while a hold matches the request's SQL text.
func (s *Server) holdAnswer(reqID, qid, sqlText string, body []byte) {
	s.answerHolds.mu.Lock()
	var h *answerHold
	for _, x := range s.answerHolds.holds {
		if x.match(sqlText) {
			h = x
			break
		}
	}
	s.answerHolds.mu.Unlock()
	if h == nil {
		return
	}
	a := HeldAnswer{QueryID: qid, RequestID: reqID, SQLText: sqlText}
	var answer struct {
		Code    string `json:"code"`
		Success bool   `json:"success"`
	}
	if json.Unmarshal(body, &answer) == nil && !answer.Success {
		a.Err = answer.Code
	}
	s.logf("sftest: holding the answer to query %s", qid)
	select {
	case h.held <- a:
	case <-h.released:
	}
	<-h.released
}

// releaseAnswers ends every hold (Close).
func (s *Server) releaseAnswers() {
	s.answerHolds.mu.Lock()
	holds := s.answerHolds.holds
	s.answerHolds.holds = nil
	s.answerHolds.mu.Unlock()
	for _, h := range holds {
		h.release()
	}
}
