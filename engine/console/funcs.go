package console

import (
	"html/template"
	"net/url"
	"strings"
	"time"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/engine/delivery"
	"github.com/dvtrun/dvtrun/store"
)

// funcs are the templates' helpers. Every text from the store goes
// through clean: html/template escapes markup, clean makes control
// characters visible.
var funcs = template.FuncMap{
	"clean":      engine.EscapeControl,
	"cleanLines": cleanBlock,
	"time":       fmtTime,
	"dur":        fmtDur,
	"ms":         func(ms int64) string { return fmtDur(time.Duration(ms) * time.Millisecond) },
	"since":      func(now, t time.Time) string { return fmtDur(now.Sub(t)) },
	"class":      func(s any) string { return statusClass(toString(s)) },
	"mark":       func(s any) string { return statusMark(toString(s)) },
	"runHref":    func(id string) string { return "/runs/" + url.PathEscape(id) },
	// The outbox's checkpoint stream has no run page.
	"isCheckpoint": func(runID string) bool { return runID == delivery.CheckpointRunID },
	"stepHref":     stepHref,
	"eventsHref":   func(id string) string { return "/runs/" + url.PathEscape(id) + "/events" },
	"trigger":      store.RunSummary.TriggerText,
	"lines":        func(s string) []string { return strings.Split(strings.TrimRight(s, "\n"), "\n") },
	"add":          func(a, b int) int { return a + b },
	"sub":          func(a, b int) int { return a - b },
	"statusFilter": func(q runsQuery, status string) string {
		v := url.Values{}
		for k, x := range map[string]string{"plan": q.Plan, "schedule": q.Schedule, "trigger": q.Trigger, "target": q.Target, "since": q.Since, "until": q.Until} {
			if x != "" {
				v.Set(k, x)
			}
		}
		if status != "" {
			v.Set("status", status)
		}
		if len(v) == 0 {
			return "/runs"
		}
		return "/runs?" + v.Encode()
	},
}

// cleanBlock is clean for multi-line text shown in <pre> (SQL): its line
// breaks and tabs stay as they are, every other control character is made
// visible, and CRLF is one line break.
func cleanBlock(s string) string {
	lines := strings.Split(strings.ReplaceAll(s, "\r\n", "\n"), "\n")
	for i, l := range lines {
		cells := strings.Split(l, "\t")
		for j, c := range cells {
			cells[j] = engine.EscapeControl(c)
		}
		lines[i] = strings.Join(cells, "\t")
	}
	return strings.Join(lines, "\n")
}

func toString(s any) string {
	switch v := s.(type) {
	case string:
		return v
	case engine.RunStatus:
		return string(v)
	case engine.StepStatus:
		return string(v)
	}
	return ""
}

func fmtTime(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format("2006-01-02 15:04:05.000Z")
}
