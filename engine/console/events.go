package console

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/store"
)

// Events page bounds: a page shows at most eventsPageMax events, read from
// the log eventsChunk at a time, and a filtered page stops after reading
// eventsScan events (the next link continues from there). A 50,000-event
// log is never read or rendered whole.
const (
	eventsPageDefault = 100
	eventsPageMax     = 500
	eventsChunk       = 1000
	eventsScan        = 20000
	maxPayloadShown   = 2000
)

// errorTypes are the events "errors only" shows.
var errorTypes = map[engine.EventType]bool{engine.StepFailed: true, engine.RunFailed: true, engine.SignalRejected: true, engine.RunCancelled: true}

// eventsPage is events.html's data.
type eventsPage struct {
	Run        store.RunSummary
	Type, Step string
	ErrorsOnly bool
	After      int64
	Limit      int
	Events     []eventRow
	ScannedTo  int64 // the last runSeq read
	Next       string
	AllURL     string // the same page without "errors only"
	Types      []engine.EventType
}

type eventRow struct {
	engine.RunEventRecord
	Payload string
}

// events serves the events page, or to an EventSource (Accept:
// text/event-stream) the run's live stream.
func (s *Server) events(w http.ResponseWriter, r *http.Request) {
	if strings.Contains(r.Header.Get("Accept"), "text/event-stream") {
		s.stream(w, r)
		return
	}
	s.handle(s.eventsPage)(w, r)
}

func (s *Server) eventsPage(r *http.Request) (page, error) {
	ctx := r.Context()
	sum, err := s.loadRun(ctx, r.PathValue("runId"))
	if err != nil {
		return page{}, err
	}
	q := r.URL.Query()
	p := eventsPage{Run: sum, Type: q.Get("type"), Step: q.Get("step"), Limit: eventsPageDefault,
		Types: []engine.EventType{engine.RunQueued, engine.RunApproved, engine.RunStarted, engine.RunPaused, engine.RunResumed, engine.RunCompleted,
			engine.RunFailed, engine.RunCancelled, engine.StepStarted, engine.StepCompleted, engine.StepFailed, engine.StepSkipped,
			engine.SignalAccepted, engine.SignalRejected}}
	for _, v := range []string{p.Type, p.Step} {
		if len(v) > maxValue || !utf8.ValidString(v) {
			return page{}, engine.Errorf(engine.CodeInvalidArgument, "filter value %s is too long or not text", engine.QuoteText(v))
		}
	}
	if p.Type != "" && !containsType(p.Types, engine.EventType(p.Type)) {
		return page{}, engine.Errorf(engine.CodeInvalidArgument, "event type %s is not one dvtrun records", engine.QuoteText(p.Type))
	}
	if v := q.Get("after"); v != "" {
		if p.After, err = strconv.ParseInt(v, 10, 64); err != nil || p.After < 0 {
			return page{}, engine.Errorf(engine.CodeInvalidArgument, "after %s is not a runSeq", engine.QuoteText(v))
		}
	}
	if v := q.Get("limit"); v != "" {
		if p.Limit, err = strconv.Atoi(v); err != nil || p.Limit < 1 || p.Limit > eventsPageMax {
			return page{}, engine.Errorf(engine.CodeInvalidArgument, "limit %s is not a number from 1 to %d", engine.QuoteText(v), eventsPageMax)
		}
	}
	// "Errors only" is the default on a failed run, until the query says.
	switch v := q.Get("errors"); v {
	case "":
		p.ErrorsOnly = sum.Status == engine.StatusFailed && p.Type == "" && p.Step == ""
	case "1", "0":
		p.ErrorsOnly = v == "1"
	default:
		return page{}, engine.Errorf(engine.CodeInvalidArgument, "errors %s is not 1 or 0", engine.QuoteText(v))
	}
	keep := func(e engine.RunEventRecord) bool {
		return (p.Type == "" || string(e.EventType) == p.Type) && (p.Step == "" || e.StepID == p.Step) && (!p.ErrorsOnly || errorTypes[e.EventType])
	}
	// Read chunk by chunk from after until the page is full, the log ends
	// or eventsScan events were read.
	p.ScannedTo = p.After
	more := false
	chunk := eventsChunk
	if p.Type == "" && p.Step == "" && !p.ErrorsOnly {
		chunk = p.Limit + 1 // unfiltered: read just the page and one more
	}
scan:
	for read := 0; ; {
		if read >= eventsScan {
			more = true
			break
		}
		var evs []engine.RunEventRecord
		if p.Step != "" {
			// A step's events are few: read them all, page them here.
			all, err := s.cfg.History.ListStepEvents(ctx, sum.RunID, p.Step)
			if err != nil {
				return page{}, err
			}
			for _, e := range all {
				if e.RunSeq > p.ScannedTo {
					evs = append(evs, e)
				}
			}
			chunk = len(evs) + 1 // one read is the whole step
		} else if evs, err = s.cfg.History.ListEvents(ctx, sum.RunID, p.ScannedTo, chunk); err != nil {
			return page{}, err
		}
		for _, e := range evs {
			if len(p.Events) == p.Limit {
				more = true
				break scan
			}
			p.ScannedTo = e.RunSeq
			if keep(e) {
				p.Events = append(p.Events, eventRow{RunEventRecord: e, Payload: payloadText(e.Payload)})
			}
		}
		read += len(evs)
		if len(evs) < chunk {
			break // the end of the log
		}
	}
	base := "/runs/" + url.PathEscape(sum.RunID) + "/events"
	link := func(after int64, errorsOnly bool) string {
		v := url.Values{}
		if after > 0 {
			v.Set("after", strconv.FormatInt(after, 10))
		}
		for k, x := range map[string]string{"type": p.Type, "step": p.Step} {
			if x != "" {
				v.Set(k, x)
			}
		}
		if errorsOnly {
			v.Set("errors", "1")
		} else {
			v.Set("errors", "0")
		}
		if p.Limit != eventsPageDefault {
			v.Set("limit", strconv.Itoa(p.Limit))
		}
		return base + "?" + v.Encode()
	}
	if more {
		p.Next = link(p.ScannedTo, p.ErrorsOnly)
	}
	p.AllURL = link(0, false)
	return page{name: "events", title: "Events of " + sum.RunID, nav: "runs", data: p}, nil
}

func containsType(ts []engine.EventType, t engine.EventType) bool {
	for _, x := range ts {
		if x == t {
			return true
		}
	}
	return false
}

// payloadText is a payload as shown: compact JSON, cut at maxPayloadShown.
func payloadText(b json.RawMessage) string {
	s := string(b)
	if len(s) > maxPayloadShown {
		cut := maxPayloadShown
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		return s[:cut] + fmt.Sprintf("… (%d bytes)", len(s))
	}
	return s
}

// streamRetryAfter is the Retry-After, in seconds, of a stream refused by
// the cap.
const streamRetryAfter = 10

// streamEvent is the data of one SSE message: enough for the page to know
// what changed.
type streamEvent struct {
	RunSeq    int64            `json:"runSeq"`
	EventType engine.EventType `json:"eventType"`
	StepID    string           `json:"stepId,omitempty"`
}

// stream sends the run's events after Last-Event-ID (a runSeq) as
// Server-Sent Events, id = runSeq, reading the log every Poll; when the
// run has ended and every event is sent it sends "end" and closes. One
// stream lasts at most StreamFor; the browser then reconnects and resumes.
func (s *Server) stream(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	// Each stream holds a connection and polls the store: past the cap a
	// browser is told to come back (EventSource reconnects by itself).
	if n := s.streams.Add(1); n > int64(s.cfg.MaxStreams) {
		s.streams.Add(-1)
		w.Header().Set("Retry-After", strconv.Itoa(streamRetryAfter))
		s.fail(w, r, http.StatusServiceUnavailable, fmt.Sprintf("The console serves at most %d live streams at once; try again in %d seconds.", s.cfg.MaxStreams, streamRetryAfter))
		return
	}
	defer s.streams.Add(-1)
	sum, err := s.loadRun(ctx, r.PathValue("runId"))
	if err != nil {
		s.failErr(w, r, err)
		return
	}
	var after int64
	if v := r.Header.Get("Last-Event-ID"); v != "" {
		if after, err = strconv.ParseInt(v, 10, 64); err != nil || after < 0 {
			s.fail(w, r, http.StatusBadRequest, "Last-Event-ID "+engine.QuoteText(v)+" is not a runSeq.")
			return
		}
	} else if v := r.URL.Query().Get("after"); v != "" {
		if after, err = strconv.ParseInt(v, 10, 64); err != nil || after < 0 {
			s.fail(w, r, http.StatusBadRequest, "after "+engine.QuoteText(v)+" is not a runSeq.")
			return
		}
	}
	flusher, ok := w.(http.Flusher)
	if !ok {
		s.fail(w, r, http.StatusInternalServerError, "This server cannot stream.")
		return
	}
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	fmt.Fprintf(w, "retry: %d\n\n", s.cfg.Poll.Milliseconds()*2)
	flusher.Flush()
	deadline := time.NewTimer(s.cfg.StreamFor)
	defer deadline.Stop()
	tick := time.NewTicker(s.cfg.Poll)
	defer tick.Stop()
	for {
		evs, err := s.cfg.History.ListEvents(ctx, sum.RunID, after, eventsChunk)
		if err != nil {
			if ctx.Err() == nil {
				s.cfg.Log.Error("console stream failed", "run", sum.RunID, "error", err.Error())
			}
			return
		}
		ended := false
		for _, e := range evs {
			b, _ := json.Marshal(streamEvent{RunSeq: e.RunSeq, EventType: e.EventType, StepID: e.StepID})
			fmt.Fprintf(w, "id: %d\nevent: runevent\ndata: %s\n\n", e.RunSeq, b)
			after = e.RunSeq
			switch e.EventType {
			case engine.RunCompleted, engine.RunFailed, engine.RunCancelled:
				ended = true
			}
		}
		if len(evs) > 0 {
			flusher.Flush()
		}
		if len(evs) == eventsChunk {
			continue // more already written: no pause
		}
		// A run that had ended when the stream opened ends it once every
		// event is sent; one that ends meanwhile sends its terminal event.
		// Either way an idle poll is one query.
		if ended || len(evs) == 0 && sum.Status.Terminal() {
			fmt.Fprintf(w, "event: end\ndata: {}\n\n")
			flusher.Flush()
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-deadline.C:
			return
		case <-tick.C:
		}
	}
}
