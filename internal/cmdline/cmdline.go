// Package cmdline parses collplan commands' flags and words their errors the same way: a bad flag
// is one line with a hint where the flags are (not the flag package's whole listing), -h is the
// full usage on stdout, and an error line carries the program's prefix once.
package cmdline

import (
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// Parse parses args into fs, printing nothing. It returns flag.ErrHelp for -h and -help, and for
// a bad flag or value the flag package's message with Hint(prog). prog is how the user runs the
// command ("planner explain").
func Parse(fs *flag.FlagSet, args []string, prog string) error {
	out := fs.Output()
	fs.SetOutput(io.Discard)
	err := fs.Parse(args)
	fs.SetOutput(out)
	if err == nil || err == flag.ErrHelp {
		return err
	}
	return Hint(prog, err)
}

// Hint adds where to read prog's flags to a command line error, keeping it one line.
func Hint(prog string, err error) error {
	return fmt.Errorf("%w (run '%s -h' for the flags)", err, prog)
}

// Usage is a command's -h text: doc (its usage line and what it does), then its flags.
func Usage(fs *flag.FlagSet, doc string) string {
	var b strings.Builder
	b.WriteString(doc)
	if !strings.HasSuffix(doc, "\n") {
		b.WriteString("\n")
	}
	b.WriteString("\nflags:\n")
	out := fs.Output()
	fs.SetOutput(&b)
	fs.PrintDefaults()
	fs.SetOutput(out)
	return b.String()
}

// ErrorLine is the line prog prints for err: "prog: " and the message, without doubling a prefix
// the message already starts with (a package named like the command prefixes its own errors).
func ErrorLine(prog string, err error) string {
	msg := err.Error()
	if strings.HasPrefix(msg, prog+": ") {
		return msg
	}
	return prog + ": " + msg
}

// PositiveInts reads a comma-separated list of integers >= 1 ("1,2,4"; "" is none); an error names
// the entry that is not one.
func PositiveInts(s string) ([]int, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	var out []int
	for _, f := range strings.Split(s, ",") {
		v, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || v < 1 {
			return nil, fmt.Errorf("%q is not a positive integer", f)
		}
		out = append(out, v)
	}
	return out, nil
}
