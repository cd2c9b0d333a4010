//go:build race

package sim

// raceEnabled is true when the tests run under the race detector.
const raceEnabled = true
