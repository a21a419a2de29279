// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/ipvs-guard/ipvs-guard/pkg/kubeproxy"
	"github.com/ipvs-guard/ipvs-guard/pkg/nftdrift"
)

// Proxy modes of the scale run (-proxy-mode).
const (
	proxyModeIPVS     = kubeproxy.ModeIPVS
	proxyModeNFTables = kubeproxy.ModeNFTables
)

// netnsEnv names the private network namespace hack/bench-scale.sh runs an
// nftables-mode bench in; kube-proxy is never started without it (it would
// write its table into the host's own network namespace).
const netnsEnv = "BENCH_NETNS"

// validateProxyMode refuses a mode the scale run has no kube-proxy for, and
// nftables mode outside a private network namespace or without a binary.
func validateProxyMode(o scaleOptions) error {
	switch o.proxyMode {
	case proxyModeIPVS:
		return nil
	case proxyModeNFTables:
		if os.Getenv(netnsEnv) == "" {
			return fmt.Errorf("-proxy-mode nftables runs the real kube-proxy, which writes its nftables table where it runs: run it through `hack/bench-scale.sh -proxy-mode nftables` (a private network namespace, %s set)", netnsEnv)
		}
		if o.kubeProxy == "" {
			return errors.New("-proxy-mode nftables needs -kube-proxy (hack/apiserver/install.sh kube-proxy builds it)")
		}
		return nil
	}
	return fmt.Errorf("-proxy-mode %q: want %s or %s", o.proxyMode, proxyModeIPVS, proxyModeNFTables)
}

// startKubeProxy starts the real kube-proxy in nftables mode as sim-0000's,
// on the loopback ports the agents read by default (metrics 10249, healthz
// 10256), and waits until its table programs every Service's ClusterIP and
// LoadBalancer IP. Every agent of the run reads this one table: the
// Services have cluster traffic policies, so kube-proxy programs the same
// table on every node.
func startKubeProxy(ctx context.Context, bin, kubeconfig, work string, services int) (*kubeProxyProcess, error) {
	log, err := os.Create(filepath.Join(work, "kube-proxy.log"))
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, "--proxy-mode=nftables", "--kubeconfig="+kubeconfig, "--hostname-override="+simNode(0),
		"--metrics-bind-address=127.0.0.1:10249", "--healthz-bind-address=127.0.0.1:10256", "--cluster-cidr=10.200.0.0/13",
		"--conntrack-max-per-core=0", "--v=1")
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		log.Close()
		return nil, fmt.Errorf("starting kube-proxy: %w", err)
	}
	// A node's kube-proxy does not share its CPU with twenty agents and a
	// niced bench: it runs at the default priority (the bench is run at
	// nice 10 on a shared machine; 50 millicores here).
	if err := syscall.Setpriority(syscall.PRIO_PROCESS, cmd.Process.Pid, 0); err != nil {
		fmt.Fprintln(os.Stderr, "kube-proxy keeps the bench's priority:", err)
	}
	kp := &kubeProxyProcess{cmd: cmd, exited: make(chan struct{})}
	go func() { _ = cmd.Wait(); log.Close(); close(kp.exited) }()
	t0 := time.Now()
	want := 2 * services // a ClusterIP and a LoadBalancer IP each
	var last string
	for time.Since(t0) < 5*time.Minute {
		select {
		case <-kp.exited:
			return nil, fmt.Errorf("kube-proxy exited: %s (log: %s)", cmd.ProcessState, filepath.Join(work, "kube-proxy.log"))
		default:
		}
		mode, err := getLocal(ctx, "http://127.0.0.1:10249/proxyMode")
		switch {
		case err != nil:
			last = err.Error()
		case mode != proxyModeNFTables:
			return kp, fmt.Errorf("kube-proxy reports mode %q, want nftables", mode)
		default:
			tables, err := (&nftdrift.Reader{NoFeed: true}).Read()
			if err != nil {
				return kp, err
			}
			n := 0
			for _, t := range tables {
				if t.Family == "ip" && t.Present {
					n = len(t.ServiceIPs)
				}
			}
			last = fmt.Sprintf("%d of %d service-ips elements", n, want)
			if n >= want {
				fmt.Printf("kube-proxy v1.37.1 in nftables mode (sim-0000's) programmed %d service-ips elements in %s\n", n, time.Since(t0).Round(time.Second))
				return kp, nil
			}
		}
		time.Sleep(time.Second)
	}
	return kp, fmt.Errorf("kube-proxy did not program every Service within 5 minutes: %s", last)
}

// getLocal reads a small answer from kube-proxy's loopback ports.
func getLocal(ctx context.Context, url string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return strings.TrimSpace(string(b)), nil
}

// kubeProxyProcess is the running kube-proxy.
type kubeProxyProcess struct {
	cmd    *exec.Cmd
	exited chan struct{} // closed once it exited
}

// pid returns kube-proxy's process ID.
func (k *kubeProxyProcess) pid() int { return k.cmd.Process.Pid }

// stop stops kube-proxy (its table goes with the run's network namespace).
func (k *kubeProxyProcess) stop() {
	if k == nil {
		return
	}
	_ = k.cmd.Process.Kill()
	select {
	case <-k.exited:
	case <-time.After(5 * time.Second):
	}
}
