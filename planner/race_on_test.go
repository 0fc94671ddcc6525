//go:build race

package planner_test

// raceDetector says the tests run under the race detector, which slows the brute-force tests'
// sequential loops tenfold; those skip there (CI runs them in go test ./... without it).
const raceDetector = true
