package postgres

// Listening is closed once the store's wake-up connection LISTENs (after
// the first subscription): a test that measures wake-ups starts there.
func (s *Store) Listening() <-chan struct{} { return s.wake.connected }

// Unchained makes s append without the hash chain, for the benchmark that
// measures what the chain costs.
func Unchained(s *Store) { s.unchained = true }
