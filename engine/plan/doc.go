// Package plan is a run's input: a dbt-style plan of seed, model, test and
// sql steps, parsed from JSON or YAML and validated (ids, dependencies,
// cycles, refs), bundled with its files under one sha256, and rendered —
// this, ref, source, var, secret and the data-interval names — into the SQL
// each step executes. Ephemeral models are inlined into their readers, and
// a recorded selection picks the steps a run executes.
package plan
