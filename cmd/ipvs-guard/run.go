// SPDX-License-Identifier: Apache-2.0

package main

import (
	"errors"

	"github.com/spf13/cobra"
)

func newRunCommand() *cobra.Command {
	var opts checkOptions
	cmd := &cobra.Command{
		Use:   "run",
		Short: "Run the node agent: reconcile loop, Node conditions, Events and metrics",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return errors.New("the agent is not built yet")
		},
	}
	opts.addFlags(cmd)
	return cmd
}
