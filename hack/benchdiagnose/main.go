// SPDX-License-Identifier: Apache-2.0

//go:build linux

// Command benchdiagnose measures the wall time and peak RSS of
// `ipvs-guard diagnose --root <tree>` over the captured host trees, in text
// and JSON, and fails when a median or a peak is over its target (50 ms,
// 30 MiB). With -baseline it runs a second binary interleaved with the first
// on the same inputs and prints the ratio of the medians, so a change can be
// compared with what it replaces on a loaded machine. Run it through
// hack/bench-diagnose.sh (make bench-diagnose).
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"
)

// sample is one diagnose run.
type sample struct {
	wall   time.Duration
	rssKiB int64
	code   int
}

// series are the runs of one binary over one tree and output format.
type series []sample

func (s series) median() time.Duration {
	d := make([]time.Duration, len(s))
	for i, x := range s {
		d[i] = x.wall
	}
	slices.Sort(d)
	return d[(len(d)+1)/2-1]
}

func (s series) max() (wall time.Duration, rssKiB int64) {
	for _, x := range s {
		wall, rssKiB = max(wall, x.wall), max(rssKiB, x.rssKiB)
	}
	return wall, rssKiB
}

// run runs diagnose once; a non-zero exit is a result (1: problems found),
// not an error.
func run(bin, tree, output string) (sample, error) {
	cmd := exec.Command(bin, "diagnose", "--root", tree, "--node-name", "bench", "-o", output)
	cmd.Stdout, cmd.Stderr = io.Discard, io.Discard
	start := time.Now()
	err := cmd.Run()
	s := sample{wall: time.Since(start)}
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		s.code = ee.ExitCode()
	case err != nil:
		return s, fmt.Errorf("running %s: %w", bin, err)
	}
	if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
		s.rssKiB = ru.Maxrss // KiB on Linux, as GNU time's %M
	}
	return s, nil
}

func main() {
	bin := flag.String("binary", "bin/ipvs-guard", "the ipvs-guard binary to measure")
	baseline := flag.String("baseline", "", "another ipvs-guard binary to run interleaved and compare with (optional)")
	runs := flag.Int("runs", 20, "runs per tree and output format")
	trees := flag.String("trees", "pkg/modules/testdata/debian12,pkg/modules/testdata/rocky8,pkg/modules/testdata/centos7,pkg/modules/testdata/ubuntu2404", "comma-separated host trees")
	maxMedian := flag.Duration("max-median", 50*time.Millisecond, "fail when a median wall time is not below this")
	maxRSS := flag.Int64("max-rss-mib", 30, "fail when a peak RSS is not below this many MiB")
	flag.Parse()
	if *runs < 1 {
		fmt.Fprintln(os.Stderr, "error: -runs must be at least 1")
		os.Exit(2)
	}
	if err := bench(os.Stdout, *bin, *baseline, *runs, strings.Split(*trees, ","), *maxMedian, *maxRSS<<10); err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}

func bench(w io.Writer, bin, baseline string, runs int, trees []string, maxMedian time.Duration, maxRSSKiB int64) error {
	fmt.Fprintf(w, "%-12s %-6s %10s %10s %10s %6s", "tree", "output", "median_ms", "max_ms", "peak_MiB", "exit")
	if baseline != "" {
		fmt.Fprintf(w, " %12s %12s %7s", "base_med_ms", "base_peak_MiB", "ratio")
	}
	fmt.Fprintln(w)
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	var over []string
	for _, tree := range trees {
		for _, output := range []string{"text", "json"} {
			var got, base series
			for i := range runs {
				// With a baseline, alternate which binary goes first, so
				// neither always finds the tree in a warmer cache.
				order := []*series{&got, &base}
				bins := []string{bin, baseline}
				if baseline == "" {
					order, bins = order[:1], bins[:1]
				} else if i%2 == 1 {
					order[0], order[1], bins[0], bins[1] = order[1], order[0], bins[1], bins[0]
				}
				for j, b := range bins {
					s, err := run(b, tree, output)
					if err != nil {
						return err
					}
					*order[j] = append(*order[j], s)
				}
			}
			med := got.median()
			maxWall, rss := got.max()
			fmt.Fprintf(w, "%-12s %-6s %10.1f %10.1f %10.1f %6d", filepath.Base(tree), output, ms(med), ms(maxWall), float64(rss)/1024, got[len(got)-1].code)
			if baseline != "" {
				_, baseRSS := base.max()
				fmt.Fprintf(w, " %12.1f %12.1f %7.2f", ms(base.median()), float64(baseRSS)/1024, float64(med)/float64(base.median()))
			}
			fmt.Fprintln(w)
			if med >= maxMedian {
				over = append(over, fmt.Sprintf("%s %s: median wall time %.1f ms not below %s", tree, output, ms(med), maxMedian))
			}
			if rss >= maxRSSKiB {
				over = append(over, fmt.Sprintf("%s %s: peak RSS %d KiB not below %d MiB", tree, output, rss, maxRSSKiB>>10))
			}
		}
	}
	if len(over) > 0 {
		return errors.New(strings.Join(over, "; "))
	}
	return nil
}
