// SPDX-License-Identifier: Apache-2.0

package nodevm

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ipvs-guard/ipvs-guard/internal/apiservertest"
	"github.com/ipvs-guard/ipvs-guard/internal/guestvm"
	"github.com/ipvs-guard/ipvs-guard/internal/testenv"
)

// File is a file added to the node's disk.
type File struct {
	// Source is the host file to copy, or empty to use Data.
	Source string
	// Data is the content when Source is empty.
	Data string
	// Mode is the file mode (default 0644).
	Mode os.FileMode
	// Link, when set, makes the path a symbolic link to Link instead.
	Link string
}

// Options configures a VM. Zero values pick defaults.
type Options struct {
	// Rootfs is the directory hack/node/rootfs.sh printed (it holds root/);
	// default $NODE_ROOTFS.
	Rootfs string
	// Dir holds the disk image and the console log; empty makes a temporary one.
	Dir string
	// Files are added to the disk, by absolute guest path.
	Files map[string]File
	// Memory is the guest RAM (default 1G).
	Memory string
	// DiskSize is the disk image size (default 2G; sparse).
	DiskSize string
	// Append is added to the kernel command line.
	Append string
	// Net gives the guest QEMU user networking on a virtio NIC: the host's
	// 127.0.0.1 is 10.0.2.2 from the guest (HostAddr), which configures
	// itself (e.g. systemd-networkd among Files).
	Net bool
	// Stdout also receives the console, if set.
	Stdout io.Writer
}

// VM is a running node.
type VM struct {
	// Console is the file the serial console is written to.
	Console string
	// Dir is the working directory.
	Dir string

	proc *apiservertest.Process
	// mu guards closed.
	mu     sync.Mutex
	closed bool
}

// HostAddr is the host's 127.0.0.1 as the guest reaches it with Options.Net.
const HostAddr = guestvm.HostAddr

// GuestAddr is the address the guest takes on QEMU's user network.
const GuestAddr = guestvm.GuestAddr

// Rootfs returns the rootfs directory Start would use.
func Rootfs(o Options) string {
	if o.Rootfs != "" {
		return o.Rootfs
	}
	return os.Getenv("NODE_ROOTFS")
}

// Start boots the node for t and kills it in t.Cleanup. Without the rootfs
// or QEMU the test is skipped (failed under CI=true).
func Start(t testing.TB, o Options) *VM {
	t.Helper()
	rootfs := Rootfs(o)
	_, errR := os.Stat(filepath.Join(rootfs, ".ready"))
	_, errQ := exec.LookPath("qemu-system-x86_64")
	testenv.Require(t, rootfs != "" && errR == nil && errQ == nil,
		fmt.Sprintf("the node rootfs (NODE_ROOTFS=%q) and qemu-system-x86_64 are needed: run hack/node/rootfs.sh", rootfs))
	if o.Dir == "" {
		o.Dir = t.TempDir()
	}
	v, err := StartVM(context.Background(), o)
	if err != nil {
		t.Fatalf("booting the node: %v", err)
	}
	t.Cleanup(v.Close)
	return v
}

// StartVM makes the disk image and starts QEMU; it does not wait for the
// guest (see WaitConsole). Call Close when done.
func StartVM(ctx context.Context, o Options) (*VM, error) {
	o.Rootfs = Rootfs(o)
	if o.Rootfs == "" {
		return nil, errors.New("nodevm: no rootfs: set Options.Rootfs or NODE_ROOTFS")
	}
	if o.Dir == "" {
		d, err := os.MkdirTemp("", "nodevm-")
		if err != nil {
			return nil, err
		}
		o.Dir = d
	}
	root := filepath.Join(o.Rootfs, "root")
	kernels, _ := filepath.Glob(filepath.Join(root, "boot", "vmlinuz-*"))
	if len(kernels) != 1 {
		return nil, fmt.Errorf("nodevm: want one kernel in %s/boot, found %d", root, len(kernels))
	}
	kver := strings.TrimPrefix(filepath.Base(kernels[0]), "vmlinuz-")
	initrd := filepath.Join(root, "boot", "initrd.img-"+kver)
	disk, err := makeDisk(ctx, o, root)
	if err != nil {
		return nil, err
	}
	v := &VM{Dir: o.Dir, Console: filepath.Join(o.Dir, "console.log")}
	console, err := os.Create(v.Console)
	if err != nil {
		return nil, err
	}
	defer console.Close() // QEMU keeps its own descriptor
	var out io.Writer = console
	if o.Stdout != nil {
		out = io.MultiWriter(console, o.Stdout)
	}
	m := guestvm.Machine{
		Kernel: kernels[0], Initrd: initrd, Memory: o.Memory, Net: o.Net,
		Drives: []string{"file=" + disk + ",if=virtio,format=raw"},
		Append: "root=/dev/vda rw console=ttyS0 panic=-1 " + o.Append,
	}
	cmd := exec.Command("qemu-system-x86_64", m.Args()...)
	cmd.Stdout, cmd.Stderr = out, out
	if v.proc, err = apiservertest.StartProcess(cmd); err != nil {
		return nil, fmt.Errorf("starting qemu: %w", err)
	}
	return v, nil
}

// makeDisk copies root and the extra files into a staging tree and makes an
// ext4 image of it.
func makeDisk(ctx context.Context, o Options, root string) (string, error) {
	stage := filepath.Join(o.Dir, "root")
	if out, err := exec.CommandContext(ctx, "cp", "-a", root, stage).CombinedOutput(); err != nil {
		return "", fmt.Errorf("copying the rootfs: %v: %s", err, out)
	}
	for p, f := range o.Files {
		dst := filepath.Join(stage, p)
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return "", err
		}
		if f.Link != "" {
			if err := os.Symlink(f.Link, dst); err != nil {
				return "", err
			}
			continue
		}
		data := []byte(f.Data)
		if f.Source != "" {
			var err error
			if data, err = os.ReadFile(f.Source); err != nil {
				return "", err
			}
		}
		mode := f.Mode
		if mode == 0 {
			mode = 0o644
		}
		if err := os.WriteFile(dst, data, mode); err != nil {
			return "", err
		}
		if err := os.Chmod(dst, mode); err != nil {
			return "", err
		}
	}
	disk := filepath.Join(o.Dir, "disk.img")
	if out, err := exec.CommandContext(ctx, "mkfs.ext4", "-q", "-F", "-L", "root", "-d", stage, disk, cmp.Or(o.DiskSize, "2G")).CombinedOutput(); err != nil {
		return "", fmt.Errorf("mkfs.ext4 -d: %v: %s", err, out)
	}
	if err := os.RemoveAll(stage); err != nil {
		return "", err
	}
	return disk, nil
}

// WaitConsole waits until the console holds substr at least n times (a
// marker printed once per boot counts boots), QEMU exits, or timeout passes.
// It returns the console so far.
func (v *VM) WaitConsole(ctx context.Context, substr string, n int, timeout time.Duration) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		raw, err := os.ReadFile(v.Console)
		if err != nil {
			return "", err
		}
		s := string(raw)
		if strings.Count(s, substr) >= n {
			return s, nil
		}
		select {
		case <-ctx.Done():
			return s, fmt.Errorf("waiting for %q x%d on the console (%s): %w", substr, n, v.Console, ctx.Err())
		case <-v.proc.Done():
			raw, _ := os.ReadFile(v.Console)
			if strings.Count(string(raw), substr) >= n {
				return string(raw), nil
			}
			return string(raw), fmt.Errorf("qemu exited (%v) before %q x%d on the console (%s)", v.proc.Err(), substr, n, v.Console)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// Wait waits for QEMU to exit (the guest powered off) or timeout.
func (v *VM) Wait(timeout time.Duration) error {
	select {
	case <-v.proc.Done():
		return v.proc.Err()
	case <-time.After(timeout):
		return fmt.Errorf("qemu still running after %v", timeout)
	}
}

// Close kills QEMU if it still runs.
func (v *VM) Close() {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.closed {
		return
	}
	v.closed = true
	v.proc.Stop()
}
