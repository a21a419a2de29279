// SPDX-License-Identifier: Apache-2.0

package hostfs

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ipvs-guard/ipvs-guard/internal/testenv"
)

// TestOpenLeasedFileIsBusyNotASpin holds a write lease on a file, as a
// process that does not want it read would: a non-blocking open gets
// EAGAIN until the kernel breaks the lease (45 s by default). Open must
// give up with ErrBusy after a bounded number of tries, well inside that
// time, instead of retrying without limit.
func TestOpenLeasedFileIsBusyNotASpin(t *testing.T) {
	testenv.RequireRoot(t) // a lease needs the file's owner or CAP_LEASE
	dir := t.TempDir()
	p := filepath.Join(dir, "leased.conf")
	if err := os.WriteFile(p, []byte("ip_vs\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// The lease holder opens the file read-only: a write lease then needs
	// no other open file description of it.
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := unix.FcntlInt(f.Fd(), unix.F_SETLEASE, unix.F_WRLCK); err != nil {
		testenv.Require(t, false, fmt.Sprintf("a write lease on %s: %v", dir, err))
	}
	defer unix.FcntlInt(f.Fd(), unix.F_SETLEASE, unix.F_UNLCK) //nolint:errcheck
	start := time.Now()
	_, err = New(dir).ReadFile("/leased.conf", testLimit)
	took := time.Since(start)
	if !errors.Is(err, ErrBusy) {
		t.Fatalf("ReadFile of a leased file: %v, want ErrBusy", err)
	}
	if !strings.Contains(err.Error(), "lease") {
		t.Errorf("error %q does not say why", err)
	}
	if took > 5*time.Second {
		t.Errorf("ReadFile of a leased file took %v, want well under the kernel's 45 s lease break", took)
	}
}
