// SPDX-License-Identifier: Apache-2.0

//go:build !linux

package agent

import (
	"context"
	"errors"
)

// ErrNotSupported is returned on platforms without kernel uevents.
var ErrNotSupported = errors.New("not supported on this platform")

// WatchModuleUevents is not supported off Linux.
func WatchModuleUevents(context.Context, func(ModuleEvent)) error { return ErrNotSupported }

// SendModuleUevent is not supported off Linux.
func SendModuleUevent(ModuleEvent, int) error { return ErrNotSupported }
