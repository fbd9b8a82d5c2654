package main

import (
	"fmt"

	"github.com/botctl/botctl/pkg/buildinfo"
	"github.com/spf13/cobra"
)

func newVersionCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print botctl's version, commit, build date, Go version and platform",
		Long: `Print botctl's version, commit, build date, Go version and platform, e.g.
  botctl 0.5.0 (commit abc1234, built 2026-12-08, go1.26.8 linux/amd64)
A release build stamps the version, commit and date (make build, make release); a
development build (go run, go build) says "dev" and the commit go recorded, if any.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			in := buildinfo.Get()
			if asJSON {
				return printJSON(cmd.OutOrStdout(), in)
			}
			_, err := fmt.Fprintln(cmd.OutOrStdout(), in.String())
			return err
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the fields as JSON: version, commit, built, go, os, arch")
	return cmd
}
