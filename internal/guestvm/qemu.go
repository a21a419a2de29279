// SPDX-License-Identifier: Apache-2.0

package guestvm

import (
	"cmp"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// Machine is a QEMU x86_64 machine booted from a kernel and an initrd with
// its console on stdio. Guests of every tier and the node tier's VM start
// from it.
type Machine struct {
	// Kernel is the kernel image (an ELF vmlinux with a PVH note, or a bzImage).
	Kernel string
	// Initrd is the initramfs.
	Initrd string
	// Append is the kernel command line.
	Append string
	// Memory is the guest RAM (default 1G).
	Memory string
	// CPUs is the number of virtual CPUs (default 1). Under TCG each is a
	// host thread (multi-threaded TCG), so more than one lets a guest
	// process answer while another keeps a vCPU busy, as on a real node.
	CPUs int
	// Drives are extra -drive values (e.g. "file=disk.img,if=virtio,format=raw").
	Drives []string
	// Net adds QEMU user networking on a virtio NIC: the host's 127.0.0.1
	// is HostAddr from the guest, which takes GuestAddr.
	Net bool
	// HostFwd is appended to the user netdev (e.g.
	// "hostfwd=tcp:127.0.0.1:8080-:80"); only with Net.
	HostFwd string
	// NoReboot makes a guest reboot end QEMU instead of resetting the machine.
	NoReboot bool
	// Taps are extra virtio NICs, each on an existing host tap device (e.g.
	// one enslaved to a bridge), after the user network's NIC.
	Taps []TapNIC
}

// TapNIC is a guest NIC backed by a host tap device.
type TapNIC struct {
	// Ifname is the tap device on the host (it must exist; QEMU runs no
	// script to create or configure it).
	Ifname string
	// MAC is the guest NIC's address, which tells it apart in the guest.
	MAC string
}

// HostAddr is the host's 127.0.0.1 as the guest reaches it with Machine.Net.
const HostAddr = "10.0.2.2"

// GuestAddr is the address the guest takes on QEMU's user network.
const GuestAddr = "10.0.2.15"

// Args returns qemu-system-x86_64's arguments for m.
func (m Machine) Args() []string {
	args := append(Accel(),
		"-m", cmp.Or(m.Memory, "1G"), "-smp", strconv.Itoa(max(m.CPUs, 1)), "-nodefaults", "-no-user-config",
		"-display", "none", "-serial", "stdio")
	if m.NoReboot {
		args = append(args, "-no-reboot")
	}
	if m.Net {
		netdev := "user,id=n0"
		if m.HostFwd != "" {
			netdev += "," + m.HostFwd
		}
		// romfile=: no iPXE option ROM (the kernel is booted directly).
		args = append(args, "-netdev", netdev, "-device", "virtio-net-pci,netdev=n0,romfile=")
	}
	for i, tap := range m.Taps {
		id := fmt.Sprintf("tap%d", i)
		args = append(args, "-netdev", "tap,id="+id+",ifname="+tap.Ifname+",script=no,downscript=no",
			"-device", "virtio-net-pci,netdev="+id+",mac="+tap.MAC+",romfile=")
	}
	for _, d := range m.Drives {
		args = append(args, "-drive", d)
	}
	args = append(args, "-kernel", m.Kernel)
	if m.Initrd != "" {
		args = append(args, "-initrd", m.Initrd)
	}
	return append(args, "-append", strings.TrimSpace(m.Append))
}

// Accel returns QEMU's accelerator flags: KVM only where it really works
// (not the PVM backend, /sys/module/kvm_pvm, which cannot run a stock
// kernel), else TCG. GUEST_ACCEL=tcg forces TCG.
func Accel() []string {
	_, pvm := os.Stat("/sys/module/kvm_pvm")
	_, intel := os.Stat("/sys/module/kvm_intel")
	_, amd := os.Stat("/sys/module/kvm_amd")
	if os.Getenv("GUEST_ACCEL") != "tcg" && pvm != nil && (intel == nil || amd == nil) {
		if f, err := os.OpenFile("/dev/kvm", os.O_RDWR, 0); err == nil {
			f.Close()
			return []string{"-accel", "kvm", "-cpu", "host"}
		}
	}
	return []string{"-accel", "tcg", "-cpu", "max"}
}
