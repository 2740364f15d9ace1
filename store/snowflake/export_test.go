package snowflake

// FenceTable is the unquoted name of a run's fence table, for tests that
// play a runner's session by hand.
func FenceTable(runID string) string { return fenceTable(runID) }
