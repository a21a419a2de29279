// SPDX-License-Identifier: Apache-2.0

// Command ipvs-guard keeps a node's IPVS prerequisites true and proves that
// MetalLB LoadBalancer IPs answer ARP. See `ipvs-guard --help`.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
	"k8s.io/klog/v2"
)

// exitError carries a process exit code out of a command without printing it as an error.
type exitError struct{ code int }

func (e exitError) Error() string { return fmt.Sprintf("exit %d", e.code) }

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := execute(ctx, os.Args[1:])
	stop()
	klog.Flush()
	os.Exit(code)
}

func execute(ctx context.Context, args []string) int {
	root := newRootCommand()
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	var ee exitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ee):
		return ee.code
	default:
		fmt.Fprintln(os.Stderr, "error:", err)
		return 2
	}
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
	root.AddCommand(newCleanupCommand(), newDiagnoseCommand(), newRunCommand(), newVersionCommand())
	return root
}
