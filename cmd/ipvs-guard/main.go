// SPDX-License-Identifier: Apache-2.0

// Command ipvs-guard keeps a node's IPVS prerequisites true and proves that
// MetalLB LoadBalancer IPs answer ARP. See `ipvs-guard --help`.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/klog/v2"

	"github.com/ipvs-guard/ipvs-guard/pkg/diagnose"
)

// exitError carries a process exit code out of a command without printing it as an error.
type exitError struct{ code int }

func (e exitError) Error() string { return fmt.Sprintf("exit %d", e.code) }

// usageError is a flag or argument no run can use: exit 2, found before
// anything is read or written.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

// outputError is a failure to write a report already begun: no second
// report is written for it.
type outputError struct{ err error }

func (e outputError) Error() string { return e.err.Error() }
func (e outputError) Unwrap() error { return e.err }

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	go exitAfterSignal(ctx, stopDeadline, func(code int) {
		klog.Flush()
		os.Exit(code)
	})
	code := execute(ctx, os.Args[1:])
	stop()
	klog.Flush()
	os.Exit(code)
}

// stopDeadline is how long after SIGTERM or SIGINT any command exits at
// the latest, whatever it waits for (an API server that streams without
// end, a check stuck in the kernel): within Kubernetes' grace period and
// docs/cli.md's 5 s. `run` stops its components within shutdownTimeout,
// inside it.
const stopDeadline = 4500 * time.Millisecond

// exitAfterSignal calls exit with diagnose.ExitError once after has passed
// since ctx ended, saying so on stderr.
func exitAfterSignal(ctx context.Context, after time.Duration, exit func(int)) {
	<-ctx.Done()
	time.Sleep(after)
	fmt.Fprintf(os.Stderr, "error: still stopping %s after the signal: exiting\n", after)
	exit(diagnose.ExitError)
}

func execute(ctx context.Context, args []string) int {
	return executeTo(ctx, args, os.Stdout, os.Stderr)
}

// executeTo runs the command args name and returns its exit code. An error
// goes to stderr; for `diagnose -o json` it is also one JSON report on
// stdout (docs/design.md §8: -o json prints one object), with "error" and, for a
// usage error, "usage": true.
func executeTo(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	root := newRootCommand()
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	err := root.ExecuteContext(ctx)
	var (
		ee exitError
		ue usageError
		oe outputError
	)
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ee):
		return ee.code
	}
	fmt.Fprintln(stderr, "error:", err)
	if cmd, _, ferr := root.Find(args); ferr == nil && cmd.Name() == "diagnose" && !errors.As(err, &oe) {
		if out, _ := flagValue(args, "output", "o"); out == "json" {
			node, ok := flagValue(args, "node-name", "")
			if !ok {
				node = (&checkOptions{nodeName: os.Getenv("NODE_NAME")}).node()
			}
			_ = diagnose.Failed(node, err, errors.As(err, &ue)).WriteJSON(stdout)
		}
	}
	return diagnose.ExitError
}

// flagValue returns the last value args give the flag --long (or -short),
// in any of pflag's spellings: --long v, --long=v, -s v, -s=v, -sv. It
// reads the raw arguments, since a usage error may stop parsing before it.
func flagValue(args []string, long, short string) (string, bool) {
	var (
		val string
		ok  bool
	)
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			break
		}
		var rest string
		switch {
		case a == "--"+long || (short != "" && a == "-"+short):
			if i+1 < len(args) {
				val, ok = args[i+1], true
				i++
			}
			continue
		case strings.HasPrefix(a, "--"+long+"="):
			rest = strings.TrimPrefix(a, "--"+long+"=")
		case short != "" && strings.HasPrefix(a, "-"+short) && !strings.HasPrefix(a, "--"):
			rest = strings.TrimPrefix(strings.TrimPrefix(a, "-"+short), "=")
		default:
			continue
		}
		val, ok = rest, true
	}
	return val, ok
}

func newRootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:           "ipvs-guard",
		Short:         "Keep IPVS prerequisites true on a node and prove LoadBalancer IPs answer ARP",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	klogFlags := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(klogFlags)
	root.PersistentFlags().AddGoFlagSet(klogFlags)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	root.AddCommand(newCleanupCommand(), newDiagnoseCommand(), newRunCommand(), newVersionCommand())
	return root
}
