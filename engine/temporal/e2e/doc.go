// Package e2e tests dvtrun's Temporal adapter against a real Temporal
// server running in process (go.temporal.io/server/temporaltest). It is a
// Go module of its own so that the server's large dependency graph stays
// out of dvtrun's main module; `make test` runs it.
package e2e
