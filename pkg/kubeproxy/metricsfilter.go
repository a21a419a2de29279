// SPDX-License-Identifier: Apache-2.0

package kubeproxy

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"

	dto "github.com/prometheus/client_model/go"
)

// SyncFamilies are the metric families ParseSyncMetrics reads from
// kube-proxy's /metrics; every other line of the body is skipped unparsed.
// A reader of more of kube-proxy's metrics adds their names to its own list
// and calls ReadFamilies with it.
var SyncFamilies = []string{metricLastSync, metricLastQueued, metricServicePending, metricEndpointPend,
	metricNFTablesSyncFailures, metricIPTablesRestoreFailures, metricNFTablesCleanupFailures, metricFullSyncDuration}

// Bounds of ReadFamilies, far above what kube-proxy publishes (its
// families carry a handful of labels; a histogram a few dozen buckets per
// series; a line is under 1 KiB): past them the body is not kube-proxy's
// and is an error, never a long parse.
const (
	// maxMetricsLine bounds one line of the body, wanted or not.
	maxMetricsLine = 64 << 10
	// maxSeriesLabels bounds the labels of one wanted sample.
	maxSeriesLabels = 32
	// maxWantedLines and maxWantedBytes bound what of the wanted families
	// is handed to the exposition parser.
	maxWantedLines = 4096
	maxWantedBytes = 1 << 20
	// ctxCheckEvery is how many lines are scanned between looks at the
	// context.
	ctxCheckEvery = 1024
)

// ErrMetricsBounds wraps the errors of a body past ReadFamilies' bounds.
var ErrMetricsBounds = errors.New("kube-proxy metrics past their bounds")

// ReadFamilies reads the named metric families from a Prometheus text
// exposition. The body is scanned line by line: only the wanted families'
// sample lines (name, name_bucket, name_sum, name_count) and their # TYPE
// and # HELP lines go to the exposition parser, so a huge or hostile family
// of no interest costs a scan, not a parse. A line longer than 64 KiB, a
// wanted sample with more than 32 labels, or more than 4,096 wanted lines or
// 1 MiB of them is
// an error wrapping ErrMetricsBounds; the scan stops when ctx ends. Families
// absent from the body are absent from the map.
func ReadFamilies(ctx context.Context, r io.Reader, names []string) (map[string]*dto.MetricFamily, error) {
	want := make(map[string]bool, len(names))
	for _, n := range names {
		want[n] = true
	}
	var kept bytes.Buffer
	br := bufio.NewReaderSize(r, maxMetricsLine)
	lineNo, wanted := 0, 0
	for {
		line, err := br.ReadSlice('\n')
		if len(line) == 0 && err == io.EOF {
			break
		}
		lineNo++
		if lineNo%ctxCheckEvery == 0 {
			if cerr := ctx.Err(); cerr != nil {
				return nil, fmt.Errorf("reading kube-proxy metrics: line %d: %w", lineNo, cerr)
			}
		}
		name, isSample := metricOfLine(line)
		keep := len(name) > 0 && wantedName(want, name, isSample)
		switch {
		case errors.Is(err, bufio.ErrBufferFull):
			if keep {
				return nil, fmt.Errorf("line %d: a line of %s longer than %d bytes: %w", lineNo, name, maxMetricsLine, ErrMetricsBounds)
			}
			// A long line of a family not read: skip the rest of it.
			if err = skipLine(ctx, br); err != nil && err != io.EOF {
				return nil, fmt.Errorf("reading kube-proxy metrics: line %d: %w", lineNo, err)
			}
			continue
		case err != nil && err != io.EOF:
			return nil, fmt.Errorf("reading kube-proxy metrics: line %d: %w", lineNo, err)
		}
		if keep {
			if wanted++; wanted > maxWantedLines || kept.Len()+len(line) >= maxWantedBytes {
				return nil, fmt.Errorf("line %d: the families read hold more than %d lines or %d bytes: %w", lineNo, maxWantedLines, maxWantedBytes, ErrMetricsBounds)
			}
			if isSample {
				if n := countLabels(bytes.TrimLeft(line, " \t")[len(name):]); n > maxSeriesLabels {
					return nil, fmt.Errorf("line %d: a sample of %s with more than %d labels: %w", lineNo, name, maxSeriesLabels, ErrMetricsBounds)
				}
			}
			kept.Write(bytes.TrimRight(line, "\n"))
			kept.WriteByte('\n')
		}
		if err == io.EOF {
			break
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("reading kube-proxy metrics: %w", err)
	}
	return parseText(&kept)
}

// skipLine reads br up to the end of the current line.
func skipLine(ctx context.Context, br *bufio.Reader) error {
	for {
		_, err := br.ReadSlice('\n')
		if !errors.Is(err, bufio.ErrBufferFull) {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
	}
}

// metricOfLine returns the metric name a line is about: a sample's name
// (isSample), or the name of a "# TYPE name …" or "# HELP name …" line;
// empty for any other line (comments, blank lines, a quoted UTF-8 name).
func metricOfLine(line []byte) (name []byte, isSample bool) {
	line = bytes.TrimLeft(line, " \t")
	if rest, ok := bytes.CutPrefix(line, []byte("#")); ok {
		rest = bytes.TrimLeft(rest, " \t")
		kw, after, ok := bytes.Cut(rest, []byte(" "))
		if !ok || (string(kw) != "TYPE" && string(kw) != "HELP") {
			return nil, false
		}
		after = bytes.TrimLeft(after, " \t")
		if i := bytes.IndexAny(after, " \t\r\n"); i >= 0 {
			after = after[:i]
		}
		return after, false
	}
	i := bytes.IndexAny(line, "{ \t\r\n")
	if i < 0 {
		i = len(line)
	}
	return line[:i], true
}

// wantedName reports whether a line about name belongs to a wanted family:
// the family's own name, or a histogram's or summary's _bucket, _sum and
// _count series.
func wantedName(want map[string]bool, name []byte, isSample bool) bool {
	if want[string(name)] {
		return true
	}
	if !isSample {
		return false
	}
	for _, suf := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := bytes.CutSuffix(name, []byte(suf)); ok && len(base) > 0 && want[string(base)] {
			return true
		}
	}
	return false
}

// countLabels counts the labels of a sample's label set (the text after its
// name): the '=' outside quoted values up to the closing brace. It reads
// the line once.
func countLabels(rest []byte) int {
	rest = bytes.TrimLeft(rest, " \t")
	if len(rest) == 0 || rest[0] != '{' {
		return 0
	}
	n, inQuote := 0, false
	for i := 1; i < len(rest); i++ {
		switch c := rest[i]; {
		case inQuote && c == '\\':
			i++
		case c == '"':
			inQuote = !inQuote
		case !inQuote && c == '=':
			n++
		case !inQuote && c == '}':
			return n
		}
	}
	return n
}
