// SPDX-License-Identifier: Apache-2.0

// Package ipvstest provides an in-memory ipvs.Interface for tests of code
// that reads the IPVS table. It never touches the kernel.
package ipvstest

import (
	"context"
	"slices"
	"sync"

	"github.com/ipvs-guard/ipvs-guard/pkg/ipvs"
)

// Fake is an in-memory IPVS table. The zero value is an empty, loaded table.
type Fake struct {
	// mu guards every field.
	mu    sync.Mutex
	table ipvs.Table
	err   error
	calls int
}

var _ ipvs.Interface = (*Fake)(nil)

// NewFake returns a Fake holding a copy of t.
func NewFake(t ipvs.Table) *Fake {
	f := &Fake{}
	f.SetTable(t)
	return f
}

// SetTable replaces the table (copied).
func (f *Fake) SetTable(t ipvs.Table) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.table = clone(t)
}

// InjectError makes every following Table call fail with err (nil clears it),
// e.g. ipvs.ErrModuleNotLoaded to simulate an unloaded ip_vs.
func (f *Fake) InjectError(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.err = err
}

// Calls returns how many times Table was called.
func (f *Fake) Calls() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls
}

// Table implements ipvs.Interface.
func (f *Fake) Table(ctx context.Context) (ipvs.Table, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if f.err != nil {
		return nil, f.err
	}
	return clone(f.table), nil
}

func clone(t ipvs.Table) ipvs.Table {
	out := make(ipvs.Table, len(t))
	for i, e := range t {
		out[i] = ipvs.Entry{Virtual: e.Virtual, Real: slices.Clone(e.Real)}
	}
	return out
}
