// SPDX-License-Identifier: Apache-2.0

package modules_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/ipvs-guard/ipvs-guard/pkg/check"
	"github.com/ipvs-guard/ipvs-guard/pkg/hostfs"
	"github.com/ipvs-guard/ipvs-guard/pkg/modules"
)

// Loading the IPVS set into the running kernel (as root, with CAP_SYS_MODULE),
// exactly as `ipvs-guard diagnose --fix` does.
func ExampleNewNativeLoader() {
	root := hostfs.New("/")
	rel, err := root.KernelRelease()
	if err != nil {
		fmt.Println(err)
		return
	}
	ix, err := modules.ReadIndex(root, rel)
	if err != nil {
		fmt.Println(err)
		return
	}
	l, err := modules.NewNativeLoader(root) // ErrKernelMismatch unless root's release is uname's
	if err != nil {
		fmt.Println(err)
		return
	}
	inserted, err := l.Load(context.Background(), modules.Desired("rr", ix))
	if errors.Is(err, modules.ErrModuleNotFound) {
		fmt.Println("kernel lacks a module:", err)
	}
	fmt.Println("inserted:", inserted)
}

// The modules check, observe-only (Remediate false changes nothing).
func ExampleNewChecker() {
	c := modules.NewChecker(modules.Config{Root: hostfs.New("testdata/centos7"), Scheduler: "rr"})
	res, err := c.Run(context.Background())
	if err != nil {
		fmt.Println("could not check:", err)
		return
	}
	fmt.Println(res.Status == check.StatusProblem, res.Reason)
	for _, f := range res.Findings {
		fmt.Println(f)
	}
	// Output:
	// true ModulesNotPersisted
	// ip_vs: loaded, available, NOT DECLARED for boot
	// ip_vs_rr: loaded, available, NOT DECLARED for boot
	// ip_vs_wrr: loaded, available, NOT DECLARED for boot
	// ip_vs_sh: loaded, available, NOT DECLARED for boot
	// nf_conntrack_ipv4: loaded, available, NOT DECLARED for boot
}
