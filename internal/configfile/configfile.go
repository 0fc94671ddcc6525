// Package configfile reads collplan's configuration inputs (node tables and their overlays,
// topology files, sweep manifests, tuner policy files) with limits: a file is at most MaxBytes,
// and a TOML document nests no deeper than its schema does, checked before the TOML decoder sees
// it. BurntSushi/toml's time and memory grow with the square of the nesting of inline tables,
// dotted keys and table headers: 8,000 nested inline tables (32 KB) took it 10 s and 7 GB of
// allocations, and 18,000 (72 KB) did not fit in 8 GB of address space.
package configfile

import (
	"fmt"
	"io"
	"os"

	"github.com/BurntSushi/toml"

	"github.com/collplan/collplan/internal/bytesize"
)

// MaxBytes is the largest configuration file read: 4 MiB. The largest shipped one is a few KiB.
const MaxBytes = 4 << 20

// SizeError is a configuration input larger than MaxBytes.
type SizeError struct {
	File string // the file as named to Read, CheckTOML or DecodeTOML
	Max  int64  // the limit, in bytes
}

func (e *SizeError) Error() string {
	return fmt.Sprintf("%s: larger than the limit of %s (%d bytes)", e.File, bytesize.Format(e.Max), e.Max)
}

// Read returns the contents of the file at path, reading at most MaxBytes+1 bytes of it: a longer
// file is a *SizeError naming path. Errors from opening and reading are os's (*fs.PathError).
func Read(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxBytes+1))
	if err != nil {
		return nil, err
	}
	if len(data) > MaxBytes {
		return nil, &SizeError{File: path, Max: MaxBytes}
	}
	return data, nil
}

// CheckTOML reports whether data, the text of the TOML file named file, is safe to decode: at most
// MaxBytes (else a *SizeError) and nested at most maxDepth levels deep (else a *DepthError naming
// the line where it goes deeper). Nesting is counted as in a decoded document's tree: each key of a
// table header or dotted key is one level and each array is one more, so in
//
//	[a.b]
//	c = [[1], {d = 2}]
//
// c is 3 levels deep, 1 is 5 and d is 5. Each call site passes its schema's deepest path. The check
// reads data once, in time linear in its length and with memory bounded by maxDepth; it is exact for
// valid TOML and, for invalid text, never counts less nesting than a decoder could build from it.
// maxDepth must be at least 1.
func CheckTOML(file string, data []byte, maxDepth int) error {
	if maxDepth < 1 {
		panic("configfile: CheckTOML with maxDepth < 1")
	}
	if len(data) > MaxBytes {
		return &SizeError{File: file, Max: MaxBytes}
	}
	if line, depth, ok := nesting(data, maxDepth); !ok {
		return &DepthError{File: file, Line: line, Depth: depth, Max: maxDepth}
	}
	return nil
}

// DecodeTOML checks data with CheckTOML and then decodes it into v with toml.Decode. Every error
// names file: the decoder's is wrapped as "FILE: %w" (errors.As still finds its toml.ParseError).
func DecodeTOML(file string, data []byte, maxDepth int, v any) (toml.MetaData, error) {
	if err := CheckTOML(file, data, maxDepth); err != nil {
		return toml.MetaData{}, err
	}
	md, err := toml.Decode(string(data), v)
	if err != nil {
		return md, fmt.Errorf("%s: %w", file, err)
	}
	return md, nil
}
