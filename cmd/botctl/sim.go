package main

import (
	"github.com/spf13/cobra"
)

// newSimCmd is replaced by the simulator's command (pkg/wecomsim).
func newSimCmd() *cobra.Command {
	return &cobra.Command{Use: "sim", Short: "Run the WeCom simulator"}
}
