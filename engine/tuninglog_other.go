//go:build !linux

package engine

import "os"

// gettid stands in for the thread id where there is no portable one: the process id.
func gettid() int { return os.Getpid() }
