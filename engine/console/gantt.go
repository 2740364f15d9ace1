package console

import (
	"fmt"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/store"
)

// maxRows bounds the steps a run page draws and lists: a huge run's page
// stays small, its failed and running steps always among those shown, and
// the events page pages through the rest.
const maxRows = 500

// shownSteps are the steps a run page shows, in the snapshot's order:
// every step when there are at most maxRows, else the failed and running
// ones first, then the rest up to maxRows.
func shownSteps(steps []engine.StepSnapshot) []engine.StepSnapshot {
	if len(steps) <= maxRows {
		return steps
	}
	keep := make([]bool, len(steps))
	n := 0
	for pass := 0; pass < 2 && n < maxRows; pass++ {
		for i, s := range steps {
			urgent := s.Status == engine.StepStatusFailed || s.Status == engine.StepStatusRunning
			if keep[i] || (pass == 0) != urgent {
				continue
			}
			keep[i] = true
			if n++; n == maxRows {
				break
			}
		}
	}
	out := make([]engine.StepSnapshot, 0, maxRows)
	for i, s := range steps {
		if keep[i] {
			out = append(out, s)
		}
	}
	return out
}

// Gantt geometry, in SVG user units.
const (
	ganttLabel = 260 // the step names' column
	// ganttMaxLabel is the characters of a step name the column holds; a
	// longer one is cut with an ellipsis (its <title> has it whole), and
	// the column clips what a wide font still pushes past it.
	ganttMaxLabel = 34
	ganttPlot     = 640
	ganttRow      = 22
	ganttTop      = 24 // the axis
)

// gantt is the run's timeline as SVG shapes: the queue wait apart from
// execution, then one bar per step.
type gantt struct {
	Width, Height int
	LabelWidth    int // the names' column, less a gap before the bars
	Ticks         []tick
	Rows          []bar
	Shown, Total  int
}

type tick struct {
	X     int
	Label string
}

// bar is one row: a label, and a bar when the thing started.
type bar struct {
	Y      int
	Label  string // the whole name: data-step, the tooltip
	Short  string // as drawn: cut to ganttMaxLabel
	Href   string
	Class  string // wait, run or the step status in lower case
	Status string // the status as text: never colour alone
	X, W   int
	HasBar bool
	Title  string
	TextX  int
}

func buildGantt(r store.RunSummary, snap engine.Snapshot) gantt {
	steps := shownSteps(snap.Steps)
	g := gantt{Width: ganttLabel + ganttPlot + 120, LabelWidth: ganttLabel - 6, Shown: len(steps), Total: len(snap.Steps)}
	// The time axis: from the request (queue wait included) to the end of
	// the last thing known to have happened.
	start := r.QueuedAt
	if start.IsZero() || (!snap.StartedAt.IsZero() && snap.StartedAt.Before(start)) {
		start = snap.StartedAt
	}
	end := snap.CompletedAt
	for _, s := range snap.Steps {
		for _, t := range []time.Time{s.StartedAt, s.CompletedAt} {
			if t.After(end) {
				end = t
			}
		}
		if start.IsZero() || (!s.StartedAt.IsZero() && s.StartedAt.Before(start)) {
			start = s.StartedAt
		}
	}
	if snap.StartedAt.After(end) {
		end = snap.StartedAt
	}
	span := end.Sub(start)
	if span <= 0 {
		span = time.Millisecond
	}
	x := func(t time.Time) int {
		if t.IsZero() {
			return ganttLabel
		}
		return ganttLabel + int(float64(t.Sub(start))/float64(span)*ganttPlot)
	}
	for i := 0; i <= 4; i++ {
		d := span * time.Duration(i) / 4
		g.Ticks = append(g.Ticks, tick{X: ganttLabel + ganttPlot*i/4, Label: fmtDur(d)})
	}
	y := ganttTop
	add := func(b bar) {
		b.Y = y
		b.Short = b.Label
		if r := []rune(b.Label); len(r) > ganttMaxLabel {
			b.Short = string(r[:ganttMaxLabel-1]) + "…"
		}
		if b.HasBar {
			if b.W < 2 {
				b.W = 2 // an instant is still visible
			}
			b.TextX = b.X + b.W + 4
		} else {
			b.TextX = ganttLabel + 4
		}
		g.Rows = append(g.Rows, b)
		y += ganttRow
	}
	if !start.IsZero() && !snap.StartedAt.IsZero() && snap.StartedAt.After(start) {
		w := r.QueueWait()
		add(bar{Label: "queue wait", Class: "wait", Status: "waited " + fmtDur(w), HasBar: true, X: x(start), W: x(snap.StartedAt) - x(start),
			Title: "queued " + fmtDur(w) + " before a worker started the run"})
	}
	if !snap.StartedAt.IsZero() {
		runEnd := snap.CompletedAt
		if runEnd.IsZero() {
			runEnd = end
		}
		add(bar{Label: "run", Class: "run", Status: string(snap.Status) + " " + fmtDur(runEnd.Sub(snap.StartedAt)), HasBar: true,
			X: x(snap.StartedAt), W: x(runEnd) - x(snap.StartedAt), Title: "execution, from start to end"})
	}
	for _, s := range steps {
		b := bar{Label: s.StepID, Href: stepHref(snap.RunID, s.StepID), Class: statusClass(string(s.Status)), Status: string(s.Status)}
		if !s.StartedAt.IsZero() {
			stop := s.CompletedAt
			if stop.IsZero() {
				stop = end
			}
			b.HasBar, b.X, b.W = true, x(s.StartedAt), x(stop)-x(s.StartedAt)
			b.Status += " " + fmtDur(stop.Sub(s.StartedAt))
			b.Title = s.StepID + ": " + b.Status
		}
		add(b)
	}
	g.Height = y + 8
	return g
}

// statusClass is the CSS class of a status (its colour); the status is
// always written beside it.
func statusClass(s string) string {
	switch s {
	case "SUCCESS", "COMPLETED":
		return "ok"
	case "FAILED":
		return "failed"
	case "RUNNING", "QUEUED", "APPROVED":
		return "running"
	case "SKIPPED", "CANCELLED", "PAUSED":
		return "skipped"
	}
	return "pending"
}

// statusMark is a status's glyph, shown with its name.
func statusMark(s string) string {
	switch statusClass(s) {
	case "ok":
		return "✓"
	case "failed":
		return "✗"
	case "running":
		return "▶"
	case "skipped":
		return "⊘"
	}
	return "○"
}

func fmtDur(d time.Duration) string {
	switch {
	case d <= 0:
		return "0s"
	case d < time.Second:
		return fmt.Sprintf("%dms", d.Milliseconds())
	case d < time.Minute:
		return fmt.Sprintf("%.1fs", d.Seconds())
	}
	return d.Round(time.Second).String()
}

func pathEscape(s string) string { return url.PathEscape(s) }

// stepHref is a step page's stable deep link.
func stepHref(runID, stepID string) string {
	return "/runs/" + url.PathEscape(runID) + "/steps/" + url.PathEscape(stepID)
}

// dag is the plan's steps in layers (each step one layer right of its
// deepest dependency), coloured and labelled by the run's status.
type dag struct {
	Width, Height int
	Nodes         []node
	Edges         []edge
	Why           string // not drawn: why
}

type node struct {
	X, Y   int
	ID     string // the label: the step id, cut to fit
	Step   string
	Href   string
	Class  string
	Status string
	Mark   string
}

// edge is a dependency, drawn as a curve from the right of the step it
// depends on to the left of the step: C1 and C2 are the control points.
type edge struct{ X1, Y1, C1, C2, X2, Y2 int }

const (
	dagW, dagH  = 200, 40
	dagGapX     = 60
	dagGapY     = 14
	dagMaxLabel = 26
	dagPad      = 10
)

// buildDAG lays out the plan's graph. Without the plan (its bundle not in
// the store), the run's own steps are drawn in one layer, unconnected.
func buildDAG(nodes []GraphNode, snap engine.Snapshot, runID string) dag {
	if len(nodes) == 0 {
		for _, s := range snap.Steps {
			nodes = append(nodes, GraphNode{ID: s.StepID})
		}
	}
	if len(nodes) > maxRows {
		return dag{Why: fmt.Sprintf("The plan has %d steps; the DAG is drawn up to %d. The step table lists them.", len(nodes), maxRows)}
	}
	idx := map[string]int{}
	for i, n := range nodes {
		idx[n.ID] = i
	}
	// Longest-path layering; a cycle (never in a valid plan) stops at the
	// number of nodes.
	layer := make([]int, len(nodes))
	for range nodes {
		changed := false
		for i, n := range nodes {
			for _, d := range n.DependsOn {
				if j, ok := idx[d]; ok && layer[j]+1 > layer[i] {
					layer[i], changed = layer[j]+1, true
				}
			}
		}
		if !changed {
			break
		}
	}
	var layers [][]int
	for i := range nodes {
		for len(layers) <= layer[i] {
			layers = append(layers, nil)
		}
		layers[layer[i]] = append(layers[layer[i]], i)
	}
	d := dag{}
	pos := make([][2]int, len(nodes))
	row := make([]float64, len(nodes)) // a node's row in its layer
	maxRowsInLayer := 0
	for l, ids := range layers {
		// Barycentre ordering: a node sits near the mean row of its
		// dependencies, which the layers before placed; fewer crossings.
		key := make(map[int]float64, len(ids))
		for _, i := range ids {
			sum, n := 0.0, 0
			for _, dep := range nodes[i].DependsOn {
				if j, ok := idx[dep]; ok {
					sum, n = sum+row[j], n+1
				}
			}
			if n > 0 {
				key[i] = sum / float64(n)
			}
		}
		slices.SortStableFunc(ids, func(a, b int) int {
			if key[a] != key[b] {
				if key[a] < key[b] {
					return -1
				}
				return 1
			}
			return strings.Compare(nodes[a].ID, nodes[b].ID)
		})
		maxRowsInLayer = max(maxRowsInLayer, len(ids))
		for k, i := range ids {
			row[i] = float64(k)
			pos[i] = [2]int{dagPad + l*(dagW+dagGapX), dagPad + k*(dagH+dagGapY)}
		}
	}
	for i, n := range nodes {
		status := "PENDING"
		if s, ok := snap.Step(n.ID); ok {
			status = string(s.Status)
		}
		label := n.ID
		if r := []rune(label); len(r) > dagMaxLabel {
			label = string(r[:dagMaxLabel-1]) + "…"
		}
		d.Nodes = append(d.Nodes, node{X: pos[i][0], Y: pos[i][1], ID: label, Step: n.ID, Href: stepHref(runID, n.ID),
			Class: statusClass(status), Status: status, Mark: statusMark(status)})
		for _, dep := range n.DependsOn {
			if j, ok := idx[dep]; ok {
				x1, x2 := pos[j][0]+dagW, pos[i][0]
				d.Edges = append(d.Edges, edge{X1: x1, Y1: pos[j][1] + dagH/2, C1: x1 + dagGapX/2, C2: x2 - dagGapX/2, X2: x2, Y2: pos[i][1] + dagH/2})
			}
		}
	}
	d.Width = 2*dagPad + len(layers)*(dagW+dagGapX) - dagGapX
	d.Height = 2*dagPad + maxRowsInLayer*(dagH+dagGapY) - dagGapY
	return d
}
