package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/collplan/collplan/internal/cmdline"
)

// subcommands are calibrate's commands besides the fit: calibrate NAME ARGS.
var subcommands = map[string]func(ctx context.Context, args []string, stdout, stderr io.Writer) error{
	"list":     runList,
	"nccl-log": runNCCLLog,
}

// parseSub parses a subcommand's flags, which may come before or after its one argument, and
// returns that argument. -h prints doc and the flags to stdout (help is true, err nil).
func parseSub(fs *flag.FlagSet, args []string, prog, doc, argName string, stdout io.Writer) (arg string, help bool, err error) {
	var pos []string
	for {
		if err := cmdline.Parse(fs, args, prog); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				_, err = io.WriteString(stdout, cmdline.Usage(fs, doc))
				return "", true, err
			}
			return "", false, usageError{err}
		}
		if fs.NArg() == 0 {
			break
		}
		pos = append(pos, fs.Arg(0))
		args = fs.Args()[1:]
	}
	switch len(pos) {
	case 0:
		return "", false, usageError{cmdline.Hint(prog, fmt.Errorf("%s is required", argName))}
	case 1:
		return pos[0], false, nil
	}
	return "", false, usageError{cmdline.Hint(prog, fmt.Errorf("unexpected argument %q (one %s)", pos[1], argName))}
}

// writeJSON prints v as indented JSON.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
