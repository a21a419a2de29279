// SPDX-License-Identifier: Apache-2.0

//go:build race

package modules

// raceDetector is true when the tests run with -race (ten times slower).
const raceDetector = true
