// SPDX-License-Identifier: Apache-2.0

package metrics

import (
	"context"
	"errors"

	"github.com/ipvs-guard/ipvs-guard/pkg/modules"
)

// CountingLoader is a modules.Loader that counts every module load attempt
// in ipvs_guard_modules_load_attempts_total. Give it to modules.Config.Loader
// in the agent. It loads the names one at a time so each gets its own result.
type CountingLoader struct {
	// Loader does the loading.
	Loader modules.Loader
	// Metrics receives one observation per name.
	Metrics *Metrics
}

var _ modules.Loader = CountingLoader{}

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
