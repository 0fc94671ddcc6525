// Package outpath checks a command's output paths before the command does any work, so that a
// path that cannot be written fails at once, naming its flag, instead of after minutes of work.
package outpath

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// File checks that path can be written as a file: it is not a directory, and it is a writable
// file or a new name in an existing writable directory. flag names the option in the error
// ("--svg"); an empty path (the option not given) is fine.
func File(flag, path string) error {
	if path == "" {
		return nil
	}
	fi, err := os.Stat(path)
	switch {
	case err == nil && fi.IsDir():
		return fmt.Errorf("%s %s: is a directory, want a file to write", flag, path)
	case err == nil:
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
		if err != nil {
			return fmt.Errorf("%s %s: not writable: %w", flag, path, unwrapPath(err))
		}
		return f.Close()
	case !absent(err):
		return fmt.Errorf("%s %s: %w", flag, path, unwrapPath(err))
	}
	dir := filepath.Dir(path)
	di, err := os.Stat(dir)
	switch {
	case absent(err):
		return fmt.Errorf("%s %s: directory %s does not exist", flag, path, dir)
	case err != nil:
		return fmt.Errorf("%s %s: directory %s: %w", flag, path, dir, unwrapPath(err))
	case !di.IsDir():
		return fmt.Errorf("%s %s: %s is not a directory", flag, path, dir)
	}
	if err := writable(dir); err != nil {
		return fmt.Errorf("%s %s: directory %s is not writable: %w", flag, path, dir, err)
	}
	return nil
}

// Dir checks that path is a directory to write files into, or can be made one (os.MkdirAll): an
// existing writable directory, or a new path whose nearest existing ancestor is a writable
// directory. flag names the option in the error; an empty path is fine.
func Dir(flag, path string) error {
	if path == "" {
		return nil
	}
	p := filepath.Clean(path)
	for {
		fi, err := os.Stat(p)
		switch {
		case err == nil && !fi.IsDir():
			if p == filepath.Clean(path) {
				return fmt.Errorf("%s %s: is a file, want a directory", flag, path)
			}
			return fmt.Errorf("%s %s: %s is not a directory", flag, path, p)
		case err == nil:
			if err := writable(p); err != nil {
				return fmt.Errorf("%s %s: directory %s is not writable: %w", flag, path, p, err)
			}
			return nil
		case !absent(err):
			return fmt.Errorf("%s %s: %w", flag, path, unwrapPath(err))
		}
		parent := filepath.Dir(p)
		if parent == p {
			return fmt.Errorf("%s %s: no existing directory to create it in", flag, path)
		}
		p = parent
	}
}

// Readable checks that path is a file the command can read (an input the command reads only
// after its work, such as calibrate --check's overlay). flag names the option in the error.
func Readable(flag, path string) error {
	fi, err := os.Stat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("%s %s: no such file", flag, path)
	case err != nil:
		return fmt.Errorf("%s %s: %w", flag, path, unwrapPath(err))
	case fi.IsDir():
		return fmt.Errorf("%s %s: is a directory, want a file", flag, path)
	}
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("%s %s: not readable: %w", flag, path, unwrapPath(err))
	}
	return f.Close()
}

// absent: nothing is at the path (ENOTDIR: a file stands where a directory of it should be, which
// the check of that directory then reports).
func absent(err error) bool {
	return errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR)
}

// writable creates and removes a file in dir: the one check that answers for permissions, ACLs
// and read-only mounts alike.
func writable(dir string) error {
	f, err := os.CreateTemp(dir, ".collplan-write-check-*")
	if err != nil {
		return unwrapPath(err)
	}
	name := f.Name()
	f.Close()
	return os.Remove(name)
}

// unwrapPath drops the *PathError's operation and path, which the caller's message already names.
func unwrapPath(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}
