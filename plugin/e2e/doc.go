// Package e2e holds the out-of-process tests and benchmarks of the tuner plugins: the cmd/tuner-*
// binaries are built once (TestMain) into a temporary directory and driven through plugin.Client,
// as the planner drives them. It has no code of its own.
package e2e
