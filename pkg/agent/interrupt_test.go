// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	"k8s.io/klog/v2"

	"github.com/ipvs-guard/ipvs-guard/pkg/check"
)

// TestShutdownLogsWhatAnInterruptedRunChanged: a remediation cut short by
// SIGTERM (a cancelled context) after it wrote the declaration file and
// loaded a module leaves a log line naming both: the run's result is never
// recorded at shutdown, so the log is the only place that says it.
func TestShutdownLogsWhatAnInterruptedRunChanged(t *testing.T) {
	var (
		mu   sync.Mutex
		logs strings.Builder
	)
	logger := funcr.New(func(prefix, args string) {
		mu.Lock()
		defer mu.Unlock()
		logs.WriteString(prefix + " " + args + "\n")
	}, funcr.Options{})
	release := make(chan struct{})
	defer close(release)
	started := make(chan struct{})
	fixing := check.Func{CheckName: check.NameModules, Fn: func(ctx context.Context) (check.Result, error) {
		check.Record(ctx, "wrote /etc/modules-load.d/ipvs.conf: declared ip_vs")
		check.Record(ctx, "loaded ip_vs")
		close(started)
		<-release // stuck in a load that ignores its context
		return check.Result{Status: check.StatusOK}, nil
	}}
	a, err := New(Config{NodeName: "n", Checkers: []check.Checker{fixing}, Publisher: &recordingPublisher{}, CheckTimeout: time.Hour, ResyncPeriod: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(klog.NewContext(context.Background(), logger))
	done := make(chan struct{})
	go func() { _ = a.Run(ctx); close(done) }()
	select {
	case <-started:
	case <-time.After(5 * time.Second):
		t.Fatal("the check did not start")
	}
	cancel()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return after cancel")
	}
	mu.Lock()
	defer mu.Unlock()
	var line string
	for _, l := range strings.Split(logs.String(), "\n") {
		if strings.Contains(l, "Check interrupted by shutdown after changing the node") {
			line = l
		}
	}
	if !strings.Contains(line, `"actions"=["wrote /etc/modules-load.d/ipvs.conf: declared ip_vs" "loaded ip_vs"]`) || !strings.Contains(line, `"check"="modules"`) {
		t.Errorf("no log line names what the interrupted run changed; logs:\n%s", logs.String())
	}
}
