// SPDX-License-Identifier: Apache-2.0

// Command serve runs etcd and kube-apiserver (internal/apiservertest) until
// SIGTERM/SIGINT, for scripts: hack/apiserver/start.sh starts it in the
// background and prints the admin kubeconfig it writes.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/ipvs-guard/ipvs-guard/internal/apiservertest"
)

func main() {
	dir := flag.String("dir", "", "working directory (data, certs, logs, kubeconfig)")
	flag.Parse()
	if *dir == "" {
		fmt.Fprintln(os.Stderr, "error: -dir is required")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	s, err := apiservertest.StartServer(ctx, apiservertest.Options{Dir: *dir})
	if err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
	// The ready marker is written last: scripts wait for it.
	if err := os.WriteFile(filepath.Join(*dir, "ready"), []byte(s.URL+"\n"), 0o600); err != nil {
		s.Close()
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
	<-ctx.Done()
	s.Close()
}
