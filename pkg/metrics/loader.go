// SPDX-License-Identifier: Apache-2.0

package metrics

import (
	"context"
	"errors"
)

// Loader loads kernel modules by name, returning the names it inserted; it has
// the method set of modules.Loader, which this package does not import.
type Loader interface {
	// Load loads names and returns the ones it inserted.
	Load(ctx context.Context, names []string) ([]string, error)
}

// CountingLoader is a modules.Loader that counts every module load attempt
// in ipvs_guard_modules_load_attempts_total. Give it to modules.Config.Loader
// in the agent. It loads the names one at a time so each gets its own result.
type CountingLoader struct {
	// Loader does the loading.
	Loader Loader
	// Metrics receives one observation per name.
	Metrics *Metrics
}

var _ Loader = CountingLoader{}

// Load implements modules.Loader.
func (l CountingLoader) Load(ctx context.Context, names []string) ([]string, error) {
	var inserted []string
	var errs []error
	for _, name := range names {
		got, err := l.Loader.Load(ctx, []string{name})
		inserted = append(inserted, got...)
		if err != nil {
			errs = append(errs, err)
		}
		l.Metrics.ObserveModuleLoad(name, err)
	}
	return inserted, errors.Join(errs...)
}
