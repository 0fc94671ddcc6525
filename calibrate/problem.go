package calibrate

import (
	"fmt"
	"strings"
)

// Problem is one rejected or suspicious place in an input: a row that will not be fitted, a line
// that looks like data but does not parse, a failed footer, a bad manifest key.
type Problem struct {
	File string
	Line int // 1-based; the line where the offending text starts
	Msg  string
}

// Error returns "FILE:LINE: msg".
func (p Problem) Error() string { return fmt.Sprintf("%s:%d: %s", p.File, p.Line, p.Msg) }

// Problems is a list of problems used as an error: each on its own line.
type Problems []Problem

// Error joins the problems, one per line.
func (ps Problems) Error() string {
	var b strings.Builder
	for i, p := range ps {
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(p.Error())
	}
	return b.String()
}

// errOrNil returns ps as an error, or nil when it is empty.
func (ps Problems) errOrNil() error {
	if len(ps) == 0 {
		return nil
	}
	return ps
}
