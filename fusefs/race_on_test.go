//go:build race

package fusefs

// raceEnabled shrinks the slowest tests under the race detector (10–20×
// slower), keeping their concurrency.
const raceEnabled = true
