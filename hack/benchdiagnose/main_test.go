// SPDX-License-Identifier: Apache-2.0

//go:build linux

package main

import (
	"testing"
	"time"
)

func TestSeries(t *testing.T) {
	ms := time.Millisecond
	tests := []struct {
		name       string
		s          series
		wantMedian time.Duration
		wantMax    time.Duration
		wantRSS    int64
	}{
		{"one", series{{wall: 5 * ms, rssKiB: 100}}, 5 * ms, 5 * ms, 100},
		{"odd count takes the middle", series{{wall: 9 * ms, rssKiB: 1}, {wall: 1 * ms, rssKiB: 300}, {wall: 4 * ms, rssKiB: 2}}, 4 * ms, 9 * ms, 300},
		{"even count takes the lower middle", series{{wall: 8 * ms}, {wall: 2 * ms}, {wall: 6 * ms}, {wall: 4 * ms}}, 4 * ms, 8 * ms, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.s.median(); got != tt.wantMedian {
				t.Errorf("median = %s, want %s", got, tt.wantMedian)
			}
			if wall, rss := tt.s.max(); wall != tt.wantMax || rss != tt.wantRSS {
				t.Errorf("max = %s, %d KiB, want %s, %d KiB", wall, rss, tt.wantMax, tt.wantRSS)
			}
		})
	}
}
