package audit

import (
	"context"
	"time"

	"github.com/dvtrun/dvtrun/engine"
	"github.com/dvtrun/dvtrun/engine/service"
)

// Service runs a Checkpointer every Every inside serve and worker, and
// hands each new checkpoint to Publish (the checkpoint file).
type Service struct {
	Checkpointer *Checkpointer
	Every        time.Duration
	// Publish receives each checkpoint this service signed; nil: none.
	Publish func(ctx context.Context, cp Checkpoint) error
	// OnError hears a failed round; the service carries on at the next.
	OnError func(error)

	loop service.Loop
}

// Start implements service.Service.
func (s *Service) Start(ctx context.Context) error {
	if s.Checkpointer == nil || s.Every <= 0 {
		return engine.Errorf(engine.CodeInvalidArgument, "the audit checkpointer needs a checkpointer and a positive interval")
	}
	return s.loop.Start(ctx, s.run)
}

// Stop implements service.Service.
func (s *Service) Stop() { s.loop.Stop() }

// Running implements service.Service.
func (s *Service) Running() bool { return s.loop.Running() }

func (s *Service) run(ctx context.Context) {
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		cp, fresh, err := s.Checkpointer.Checkpoint(ctx)
		if err == nil && fresh && s.Publish != nil {
			err = s.Publish(ctx, cp)
		}
		if err != nil && ctx.Err() == nil && s.OnError != nil {
			s.OnError(err)
		}
		t.Reset(s.Every)
	}
}
