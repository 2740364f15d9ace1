package engine

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestSleep(t *testing.T) {
	done, cancel := context.WithCancel(context.Background())
	cancel()
	for _, tc := range []struct {
		name string
		ctx  context.Context
		d    time.Duration
		want error
	}{
		{"timer ends", context.Background(), time.Millisecond, nil},
		{"context ended first", done, time.Hour, context.Canceled},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := Sleep(tc.ctx, tc.d); !errors.Is(err, tc.want) {
				t.Fatalf("Sleep: %v, want %v", err, tc.want)
			}
		})
	}
}
