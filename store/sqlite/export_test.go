package sqlite

// Unchained makes s append without the hash chain, for the benchmark that
// measures what the chain costs.
func Unchained(s *Store) { s.unchained = true }
