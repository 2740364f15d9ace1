package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/engine/projection"
)

func cmdProject(ctx context.Context, c *cli, args []string) error {
	fs := c.newFlagSet("project", "", "Keep the live snapshot table (dvt_live_snapshots) current from each run's watermark,\nraising PROJECTOR_LAG_HIGH and PROJECTOR_NON_CONTIGUOUS_FETCH_DETECTED. Runs until interrupted.")
	once := fs.Bool("once", false, "project every pending run, then exit")
	interval := fs.Duration("interval", time.Second, "how often to look for runs whose log moved on")
	if _, err := c.parse(fs, args, 0, 0); err != nil {
		return err
	}
	if err := checkInterval(*interval); err != nil {
		return err
	}
	st, err := c.openStore(ctx, true)
	if err != nil {
		return err
	}
	defer st.Close()
	svc := &projection.Service{
		Store:    st,
		Clock:    engine.ClockFunc(time.Now),
		Interval: *interval,
		OnError:  func(err error) { fmt.Fprintln(c.stderr, c.errorLine(err)) },
	}
	if *once {
		total := 0
		for {
			n, err := svc.ProjectPending(ctx)
			total += n
			if err != nil {
				return err
			}
			if n == 0 {
				break
			}
		}
		fmt.Fprintf(c.stdout, "Projected %d snapshot(s).\n", total)
		return nil
	}
	if err := svc.Start(ctx); err != nil {
		return err
	}
	fmt.Fprintf(c.stdout, "Projecting every %s; Ctrl-C stops.\n", *interval)
	<-ctx.Done()
	svc.Stop()
	if errors.Is(ctx.Err(), context.Canceled) {
		return nil // stopped by the operator: a clean exit
	}
	return ctx.Err()
}
