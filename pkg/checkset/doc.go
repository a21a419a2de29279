// SPDX-License-Identifier: Apache-2.0

// Package checkset builds ipvs-guard's set of checks, node-local and
// cluster-aware, from one [Config] value, for both `ipvs-guard diagnose` and
// `ipvs-guard run`: cmd/ipvs-guard parses flags into a Config and calls
// [Build]; the two commands differ only in the Config they pass (remediation,
// and the agent's informer-fed cluster view instead of a one-shot listing).
//
// It is the one place the checks are wired: adding a check is its own
// package plus one line in Build. It owns no check logic and must not run,
// publish or expose anything itself.
package checkset
