// SPDX-License-Identifier: Apache-2.0

// Package results keeps the latest result of every check the agent runs, with
// run bookkeeping (last run, last success, duration, error counts), behind a
// lock. The agent loop writes it; the node status publisher and the
// Prometheus collector read it.
//
// It owns no check and does no I/O.
package results
