// SPDX-License-Identifier: Apache-2.0

package guestvm

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// fakeQEMU stands in for qemu-system-x86_64 to drive Boot's exit paths
// without a kernel (the guest tier boots the real one): it prints what
// FAKE_QEMU says, using the nonce from the kernel command line.
const fakeQEMU = `#!/bin/sh
for a; do case "$a" in *ipvsguard.nonce=*) nonce=$(echo "$a" | sed 's/.*ipvsguard.nonce=\([0-9a-f]*\).*/\1/') ;; esac; done
printf '[    0.100000] Linux version 6.1.0\r\n'
case "$FAKE_QEMU" in
exit*) echo "guest says hello"; echo "ipvs-guard-guest-exit $nonce ${FAKE_QEMU#exit }" ;;
stale) echo "ipvs-guard-guest-exit 0000000000000000 0" ;;
panic) echo "Kernel panic - not syncing: Attempted to kill init!" ;;
hang) exec sleep 60 ;;
esac
`

func TestBoot(t *testing.T) {
	bin := t.TempDir()
	if err := os.WriteFile(filepath.Join(bin, "qemu-system-x86_64"), []byte(fakeQEMU), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	tests := []struct {
		mode    string
		filter  bool
		want    int
		stdout  string // what Stdout must contain
		hidden  string // what it must not
		logWant string
	}{
		{mode: "exit 0", want: 0, stdout: "guest says hello", logWant: "with exit code 0"},
		{mode: "exit 1", filter: true, want: 1, stdout: "guest says hello", hidden: "Linux version", logWant: "with exit code 1"},
		{mode: "stale", want: ExitCrashed, logWant: "without reporting an exit code"},
		{mode: "panic", want: ExitCrashed, stdout: "Kernel panic", logWant: "Kernel panic"},
		{mode: "hang", want: ExitCrashed, logWant: "timed out"},
	}
	for _, tt := range tests {
		t.Run(tt.mode, func(t *testing.T) {
			t.Setenv("FAKE_QEMU", tt.mode)
			var stdout, logs strings.Builder
			o := BootOptions{
				Machine: Machine{Kernel: "vmlinux"},
				Console: filepath.Join(t.TempDir(), "console.log"),
				Stdout:  &stdout, Filter: tt.filter, Log: &logs, Timeout: 2 * time.Second,
			}
			got, err := Boot(context.Background(), o)
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Errorf("exit code %d, want %d; log:\n%s", got, tt.want, logs.String())
			}
			if !strings.Contains(stdout.String(), tt.stdout) || (tt.hidden != "" && strings.Contains(stdout.String(), tt.hidden)) {
				t.Errorf("stdout %q: want %q, without %q", stdout.String(), tt.stdout, tt.hidden)
			}
			if !strings.Contains(logs.String(), tt.logWant) {
				t.Errorf("log %q lacks %q", logs.String(), tt.logWant)
			}
			console, err := os.ReadFile(o.Console)
			if err != nil {
				t.Fatal(err)
			}
			if strings.Contains(string(console), "\r") || !strings.Contains(string(console), "Linux version") {
				t.Errorf("console file %q: want every line, without carriage returns", console)
			}
		})
	}
}
