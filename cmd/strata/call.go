package main

import (
	"errors"
	"fmt"
	"strings"

	"github.com/strata-sandbox/strata/checkpoint"
	"github.com/strata-sandbox/strata/layers"
)

// call runs one op on the store — through its server, or in this process
// when none runs — and turns a failure into the command's error: what
// failed, why, and a hint; sandbox is what the hint names ("" when the
// command names no sandbox).
func (g *globals) call(what, sandbox, op string, args, result any) error {
	s, err := g.connect()
	if err != nil {
		return opFail(what, err, sandbox)
	}
	defer s.Close()
	if err := s.Call(op, args, result); err != nil {
		return opFail(what, err, sandbox)
	}
	return nil
}

// opFail is fail with the hints of the checkpoint commands, and without
// saying twice what failed when the error already starts with it
// ("rollback demo: rollback demo: ...").
func opFail(what string, err error, sandbox string) error {
	if strings.HasPrefix(err.Error(), what+": ") {
		what = ""
	}
	e := fail(what, err, sandbox).(*cliError)
	if e.hint == "" {
		e.hint = checkpointHint(err, sandbox)
	}
	return e
}

// checkpointHint suggests where to find the right id.
func checkpointHint(err error, sandbox string) string {
	list := "`strata checkpoint list SANDBOX`"
	if sandbox != "" {
		list = fmt.Sprintf("`strata checkpoint list %s`", sandbox)
	}
	msg := err.Error()
	switch {
	case errors.Is(err, checkpoint.ErrAmbiguous) && strings.Contains(msg, "archive"):
		return "give more characters of the id; run `strata archive list SANDBOX` to see them"
	case errors.Is(err, checkpoint.ErrAmbiguous) && strings.Contains(msg, "layer"):
		return "give more characters of the id; run `strata layers list SANDBOX` to see them"
	case errors.Is(err, checkpoint.ErrAmbiguous) && sandbox == "":
		return "give more characters of the id, or name the sandbox (a label is unique only within one); run " + list + " to see them"
	case errors.Is(err, checkpoint.ErrAmbiguous):
		return "give more characters of the id, or a label; run " + list + " to see them"
	case errors.Is(err, checkpoint.ErrOtherSandbox):
		return "run " + list + " to see that sandbox's checkpoints"
	case errors.Is(err, layers.ErrNotFound) && strings.Contains(msg, "archive "):
		return "run `strata archive list SANDBOX` to see the archives"
	case errors.Is(err, layers.ErrNotFound) && strings.Contains(msg, "layer "):
		return "run `strata layers list SANDBOX` to see the layers"
	case errors.Is(err, layers.ErrNotFound) && strings.Contains(msg, "checkpoint"):
		return "run " + list + " to see the checkpoints"
	case errors.Is(err, layers.ErrExists) && strings.Contains(msg, "not empty"):
		return "export into a new or empty directory"
	}
	return ""
}
