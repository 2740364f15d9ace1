package runner_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/engine/plan"
	"github.com/dvtrun/dvtrun/engine/runner"
	"github.com/dvtrun/dvtrun/store/sqlite"
)

// Targets (issue #3): the runner adds at most 1 ms per step over running
// the same statements directly, and a 10,000-step run stays under 200 MB.

// benchPlan is n trivial sql steps; every third depends on the step seven
// before it and every fifth on the one before, so the DAG has both chains
// and independent branches for the threads.
func benchPlan(n int) *plan.Plan {
	p := &plan.Plan{PlanID: "bench", PlanVersion: "1"}
	for i := range n {
		s := plan.Step{ID: fmt.Sprintf("sql.s%05d", i), Kind: plan.KindSQL, SQL: "select 1"}
		if i%3 == 0 && i >= 7 {
			s.DependsOn = append(s.DependsOn, fmt.Sprintf("sql.s%05d", i-7))
		}
		if i%5 == 0 && i >= 1 {
			s.DependsOn = append(s.DependsOn, fmt.Sprintf("sql.s%05d", i-1))
		}
		p.Steps = append(p.Steps, s)
	}
	return p
}

type benchIDs struct {
	mu sync.Mutex
	n  uint64
}

func (b *benchIDs) NewID() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.n++
	return fmt.Sprintf("%08x-0000-4000-8000-%012x", time.Now().Unix()&0xffffffff, b.n)
}

// benchRun opens a fresh state store and warehouse, runs p once and
// returns how long StartRun + Execute took and the warehouse (open; the
// caller closes it).
func benchRun(b *testing.B, p *plan.Plan, threads int) (time.Duration, *sqlite.Warehouse) {
	b.Helper()
	ctx := context.Background()
	dir := b.TempDir()
	st, err := sqlite.Open(ctx, filepath.Join(dir, "state.db"), sqlite.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	wh, err := sqlite.OpenWarehouse(ctx, filepath.Join(dir, "warehouse.db"))
	if err != nil {
		b.Fatal(err)
	}
	cfg := engine.Config{TenantID: "acme", ProjectID: "bench", EnvironmentID: "bench"}
	eng := &engine.Engine{Log: st, Clock: engine.ClockFunc(time.Now), IDs: &benchIDs{}, Config: cfg}
	// The benchmarks measure the runner, not the store's latency: a write
	// budget of a minute, so that a loaded machine (CI runs every
	// benchmark once) slows them instead of stopping them STORE_UNAVAILABLE,
	// as the default 3s did to the 10,000-step run's RunStarted.
	rn := &runner.Runner{Log: st, Clock: eng.Clock, IDs: eng.IDs, Config: runner.Config{Config: cfg, Threads: threads, Owner: "bench", WriteBudget: time.Minute}}
	start := time.Now()
	runID, err := eng.StartRun(ctx, engine.StartRequest{Plan: p})
	if err != nil {
		b.Fatal(err)
	}
	snap, err := rn.Execute(ctx, runID, p, wh)
	elapsed := time.Since(start)
	if err != nil {
		b.Fatal(err)
	}
	if snap.Status != engine.StatusCompleted {
		b.Fatalf("run %s: %+v", snap.Status, snap.Error)
	}
	return elapsed, wh
}

// direct runs the plan's statements one after another through the
// warehouse's RunStep (what a step costs without the runner) and through
// the database handle alone.
func direct(b *testing.B, wh *sqlite.Warehouse, p *plan.Plan) (runStep, exec time.Duration) {
	b.Helper()
	ctx := context.Background()
	start := time.Now()
	for _, s := range p.Steps {
		if _, err := wh.RunStep(ctx, engine.StepRequest{StepID: s.ID, Kind: s.Kind, SQL: s.SQL}); err != nil {
			b.Fatal(err)
		}
	}
	runStep = time.Since(start)
	start = time.Now()
	for _, s := range p.Steps {
		if _, err := wh.DB().ExecContext(ctx, s.SQL); err != nil {
			b.Fatal(err)
		}
	}
	return runStep, time.Since(start)
}

func BenchmarkRunner2000Steps(b *testing.B) {
	const n = 2000
	p := benchPlan(n)
	var runner, viaRunStep, viaExec time.Duration
	for range b.N {
		elapsed, wh := benchRun(b, p, 4)
		b.StopTimer()
		rs, ex := direct(b, wh, p)
		wh.Close()
		b.StartTimer()
		runner += elapsed
		viaRunStep += rs
		viaExec += ex
	}
	steps := float64(n * b.N)
	b.ReportMetric(steps/runner.Seconds(), "steps/s")
	b.ReportMetric(float64((runner-viaRunStep).Microseconds())/1000/steps, "overhead-ms/step")
	b.ReportMetric(float64((runner-viaExec).Microseconds())/1000/steps, "overhead-vs-exec-ms/step")
}

func BenchmarkDirect2000(b *testing.B) {
	const n = 2000
	p := benchPlan(n)
	ctx := context.Background()
	wh, err := sqlite.OpenWarehouse(ctx, filepath.Join(b.TempDir(), "warehouse.db"))
	if err != nil {
		b.Fatal(err)
	}
	defer wh.Close()
	b.Run("exec", func(b *testing.B) {
		for range b.N {
			for _, s := range p.Steps {
				if _, err := wh.DB().ExecContext(ctx, s.SQL); err != nil {
					b.Fatal(err)
				}
			}
		}
		b.ReportMetric(float64(n*b.N)/b.Elapsed().Seconds(), "steps/s")
	})
	b.Run("runstep", func(b *testing.B) {
		for range b.N {
			for _, s := range p.Steps {
				if _, err := wh.RunStep(ctx, engine.StepRequest{StepID: s.ID, Kind: s.Kind, SQL: s.SQL}); err != nil {
					b.Fatal(err)
				}
			}
		}
		b.ReportMetric(float64(n*b.N)/b.Elapsed().Seconds(), "steps/s")
	})
}

// BenchmarkRunner10000StepsMemory reports the peak Go heap while a
// 10,000-step run executes (sampled every 5 ms) and the process's peak RSS.
func BenchmarkRunner10000StepsMemory(b *testing.B) {
	if testing.Short() {
		b.Skip("10,000 steps")
	}
	const n = 10000
	p := benchPlan(n)
	var peak uint64
	// VmHWM is the whole process's peak: benchmarks that ran before this one
	// in the same binary (the million-event reducer) would be counted too.
	debug.FreeOSMemory()
	rssReset := resetPeakRSS()
	for range b.N {
		runtime.GC()
		stop := make(chan struct{})
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			var ms runtime.MemStats
			t := time.NewTicker(5 * time.Millisecond)
			defer t.Stop()
			for {
				runtime.ReadMemStats(&ms)
				peak = max(peak, ms.HeapAlloc)
				select {
				case <-stop:
					return
				case <-t.C:
				}
			}
		}()
		_, wh := benchRun(b, p, 4)
		close(stop)
		wg.Wait()
		wh.Close()
	}
	b.ReportMetric(float64(peak)/(1<<20), "peak-heap-MB")
	if rss := peakRSS(); rss > 0 && rssReset {
		b.ReportMetric(float64(rss)/(1<<20), "peak-rss-MB")
	}
}

// resetPeakRSS sets VmHWM back to the current RSS (Linux >= 4.0) and
// reports whether it could.
func resetPeakRSS() bool {
	return os.WriteFile("/proc/self/clear_refs", []byte("5"), 0) == nil
}

// peakRSS reads VmHWM (Linux); 0 elsewhere.
func peakRSS() uint64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			kb, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				return 0
			}
			return kb << 10
		}
	}
	return 0
}
