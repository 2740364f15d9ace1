package spool

import (
	"fmt"
	"testing"

	"github.com/dvtrun/dvtrun/engine"
)

// BenchmarkPut: one durable Put (write and fsync) of a batch, what the
// writer pays when it fails a StepStarted open.
func BenchmarkPut(b *testing.B) {
	for _, n := range []int{1, 8} {
		b.Run(fmt.Sprintf("events=%d", n), func(b *testing.B) {
			d, err := Open(b.TempDir())
			if err != nil {
				b.Fatal(err)
			}
			batch := make([]engine.RunEventWrite, n)
			for i := range batch {
				batch[i] = event("r", i)
			}
			for b.Loop() {
				if err := d.Put("r", batch); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
