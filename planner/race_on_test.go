//go:build race

package planner_test

// raceDetector says the tests run under the race detector, which slows the brute-force tests'
// sequential loops tenfold; those check less there (CI runs them whole in go test ./...).
const raceDetector = true
