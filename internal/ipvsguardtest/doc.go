// SPDX-License-Identifier: Apache-2.0

// Package ipvsguardtest provides the ipvs-guard binary under test to tests
// that run it as a process (the chart's flags, the agent scraped by promtool,
// diagnose inside a network namespace): one way to get it, so every tier
// runs the same build.
//
// It is test support only: nothing outside *_test.go files may import it.
package ipvsguardtest
