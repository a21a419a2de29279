// SPDX-License-Identifier: Apache-2.0

// Command pause is the node tier's pod sandbox ("pause") container: no
// registry is reachable, so hack/node/images.sh builds this into the image
// containerd's CRI plugin uses as its sandbox. Like Kubernetes' own pause, it
// sleeps as PID 1 of the pod's namespaces, reaps orphaned children, and exits
// 0 on SIGTERM or SIGINT.
package main

import (
	"os"
	"os/signal"

	"golang.org/x/sys/unix"
)

func main() {
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, unix.SIGTERM, unix.SIGINT, unix.SIGCHLD)
	for s := range sigs {
		if s != unix.SIGCHLD {
			os.Exit(0)
		}
		for {
			pid, err := unix.Wait4(-1, nil, unix.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}
