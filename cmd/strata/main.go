// Command strata creates, mounts and serves copy-on-write sandboxes.
//
// Every command reaches the store's server over its control socket when one
// runs, and opens the store itself otherwise. See docs/control.md and the
// CLI contract in the README.
package main

import (
	"io"
	"os"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run executes one command line and returns the process's exit code: 0 on
// success, 2 for bad usage, 1 for any other failure. The error, if any, is
// printed here and only here.
func run(args []string, stdout, stderr io.Writer) int {
	g := &globals{stdout: stdout, stderr: stderr}
	root := newRootCommand(g)
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	err := root.Execute()
	if err == nil {
		return 0
	}
	printError(stderr, err)
	return exitCode(err)
}
