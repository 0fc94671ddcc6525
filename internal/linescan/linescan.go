// Package linescan reads line-oriented inputs (sweeps, logs, query lines) as a stream, one line
// at a time, with a bound on the length of a line: a longer line is an error naming the input and
// the line's number, not a silent stop or bufio's "token too long".
package linescan

import (
	"bufio"
	"errors"
	"fmt"
	"io"
)

// MaxBytes is the longest line read: 16 MiB, without its newline.
const MaxBytes = 16 << 20

// LongLineError is a line longer than MaxBytes.
type LongLineError struct {
	Name string // the input, as named to New
	Line int    // 1-based number of the line
	Max  int    // the limit, in bytes
}

func (e *LongLineError) Error() string {
	return fmt.Sprintf("%s:%d: line longer than %d bytes", e.Name, e.Line, e.Max)
}

// Scanner reads lines as bufio.Scanner with bufio.ScanLines does (a trailing "\r" dropped, the last
// line with or without a newline) and counts them. It holds at most one line in memory.
type Scanner struct {
	name string
	sc   *bufio.Scanner
	line int
	err  error
}

// New returns a Scanner reading r; name is the input in errors ("stdin", a file's path).
func New(name string, r io.Reader) *Scanner {
	sc := bufio.NewScanner(r)
	// Room for a line of MaxBytes and its "\r\n"; a longer token is refused in Scan.
	sc.Buffer(make([]byte, 0, 64<<10), MaxBytes+2)
	return &Scanner{name: name, sc: sc}
}

// Scan advances to the next line and reports whether there is one. It returns false at the end of
// the input, on a read error and on a line longer than MaxBytes; Err tells which.
func (s *Scanner) Scan() bool {
	if s.err != nil {
		return false
	}
	if !s.sc.Scan() {
		if err := s.sc.Err(); errors.Is(err, bufio.ErrTooLong) {
			s.line++
			s.err = &LongLineError{Name: s.name, Line: s.line, Max: MaxBytes}
		} else {
			s.err = err
		}
		return false
	}
	s.line++
	if len(s.sc.Bytes()) > MaxBytes {
		s.err = &LongLineError{Name: s.name, Line: s.line, Max: MaxBytes}
		return false
	}
	return true
}

// Text returns the line Scan read, without its newline.
func (s *Scanner) Text() string { return s.sc.Text() }

// Bytes returns the line Scan read, without its newline; the slice is overwritten by the next Scan.
func (s *Scanner) Bytes() []byte { return s.sc.Bytes() }

// Line returns the 1-based number of the line Scan read (after a *LongLineError, of that line).
func (s *Scanner) Line() int { return s.line }

// Err returns nil at the end of the input, else the read error or a *LongLineError.
func (s *Scanner) Err() error { return s.err }
