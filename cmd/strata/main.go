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
	os.Exit(runAs(os.Args[0], os.Args[1:], os.Stdout, os.Stderr))
}

// runAs is run, or the mount helper when mount(8) is the caller
// (mounthelper.go).
func runAs(argv0 string, args []string, stdout, stderr io.Writer) int {
	if helperInvocation(argv0, args, isCommand) {
		return runHelper(args, stdout, stderr)
	}
	return run(args, stdout, stderr)
}

// isCommand reports whether name is one of strata's commands.
func isCommand(name string) bool { return commandNames()[name] }

// commandNames are the names strata's commands answer to, help included.
func commandNames() map[string]bool {
	names := map[string]bool{"help": true}
	for _, c := range newRootCommand(&globals{}).Commands() {
		names[c.Name()] = true
		for _, a := range c.Aliases {
			names[a] = true
		}
	}
	return names
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
