package main

import (
	"io"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"
)

// globals are the flags and streams every command shares.
type globals struct {
	store  string
	json   bool
	stdout io.Writer
	stderr io.Writer
}

// defaultStore is $STRATA_STORE, else /var/lib/strata for root, else
// $XDG_DATA_HOME/strata or ~/.local/share/strata.
func defaultStore() string {
	if d := os.Getenv("STRATA_STORE"); d != "" {
		return d
	}
	if os.Geteuid() == 0 {
		return "/var/lib/strata"
	}
	if x := os.Getenv("XDG_DATA_HOME"); x != "" {
		return filepath.Join(x, "strata")
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return filepath.Join(".local", "share", "strata")
	}
	return filepath.Join(home, ".local", "share", "strata")
}

func newRootCommand(g *globals) *cobra.Command {
	root := &cobra.Command{
		Use:           "strata",
		Short:         "Copy-on-write sandboxes for AI agents, served with FUSE",
		SilenceUsage:  true,
		SilenceErrors: true,
		Args:          cobra.ArbitraryArgs,
		RunE:          groupRun,
		PersistentPreRunE: func(cmd *cobra.Command, args []string) error {
			if g.store == "" {
				// Not the working directory: a store made there by mistake
				// is hard to notice.
				return usageErrorf(cmd, "--store: empty; want the store's directory")
			}
			abs, err := filepath.Abs(g.store)
			if err != nil {
				return fail("store "+g.store, err, "")
			}
			g.store = abs
			return nil
		},
		CompletionOptions: cobra.CompletionOptions{DisableDefaultCmd: true},
	}
	root.PersistentFlags().StringVar(&g.store, "store", defaultStore(), "store directory (env STRATA_STORE)")
	root.PersistentFlags().BoolVar(&g.json, "json", false, "print one JSON document on stdout")
	root.SetFlagErrorFunc(func(cmd *cobra.Command, err error) error {
		return usageErrorf(cmd, "%v", err)
	})
	root.AddCommand(
		newSandboxCommand(g),
		newMountCommand(g),
		newUnmountCommand(g),
		newStatusCommand(g),
		newServeCommand(g),
		newCheckpointCommand(g),
		newRollbackCommand(g),
		newVerifyCommand(g),
		newLayersCommand(g),
		newArchiveCommand(g),
		newGCCommand(g),
		newFsckCommand(g),
		newPlanCommand(g),
		newMountHelperTopic(),
	)
	return root
}
