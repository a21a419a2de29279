// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"bytes"
	"strconv"
	"strings"
)

// ModuleEvent is a kernel module uevent: a module was loaded or unloaded.
type ModuleEvent struct {
	// Action is "add" or "remove".
	Action string
	// Module is the module's name, e.g. "ip_vs".
	Module string
}

// ParseModuleUevent parses one NETLINK_KOBJECT_UEVENT datagram from the
// kernel ("add@/module/ip_vs\x00ACTION=add\x00DEVPATH=/module/ip_vs\x00
// SUBSYSTEM=module\x00…"). It reports false for anything that is not a module
// add or remove (other subsystems, udev's re-broadcasts, malformed input).
func ParseModuleUevent(msg []byte) (ModuleEvent, bool) {
	fields := bytes.Split(msg, []byte{0})
	if len(fields) < 2 {
		return ModuleEvent{}, false
	}
	head := string(fields[0])
	at := strings.IndexByte(head, '@')
	if at <= 0 {
		return ModuleEvent{}, false
	}
	var action, devpath, subsystem string
	for _, f := range fields[1:] {
		k, v, ok := strings.Cut(string(f), "=")
		if !ok {
			continue
		}
		switch k {
		case "ACTION":
			action = v
		case "DEVPATH":
			devpath = v
		case "SUBSYSTEM":
			subsystem = v
		}
	}
	if subsystem != "module" || (action != "add" && action != "remove") {
		return ModuleEvent{}, false
	}
	if head[:at] != action || head[at+1:] != devpath {
		return ModuleEvent{}, false
	}
	name, ok := strings.CutPrefix(devpath, "/module/")
	if !ok || name == "" || strings.ContainsAny(name, "/\x00") {
		return ModuleEvent{}, false
	}
	return ModuleEvent{Action: action, Module: name}, true
}

// FormatModuleUevent builds the datagram the kernel sends for ev (the inverse
// of ParseModuleUevent), for tests and benchmarks that inject uevents.
func FormatModuleUevent(ev ModuleEvent, seq int) []byte {
	var b bytes.Buffer
	dev := "/module/" + ev.Module
	for _, f := range []string{ev.Action + "@" + dev, "ACTION=" + ev.Action, "DEVPATH=" + dev, "SUBSYSTEM=module", "SEQNUM=" + strconv.Itoa(seq)} {
		b.WriteString(f)
		b.WriteByte(0)
	}
	return b.Bytes()
}
