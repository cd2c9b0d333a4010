package testenv

import (
	"runtime"
	"testing"
)

// HeapPer measures the live heap that build leaves behind, per item of n
// (bytes, after a GC before and after; the value build returns is kept
// alive until measured), logs it as what, and fails t when it is over
// limit. It is for size properties of data structures (issue 17): limit
// should be generous, the figure is not a timing but allocator size
// classes and map growth make it move by some percent.
func HeapPer(t testing.TB, n int, what string, limit float64, build func() any) float64 {
	t.Helper()
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	kept := build()
	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(kept)
	per := (float64(after.HeapAlloc) - float64(before.HeapAlloc)) / float64(n)
	t.Logf("%s: %.0f B per item (%d items)", what, per, n)
	if per > limit {
		t.Fatalf("%s: %.0f B per item, want at most %.0f", what, per, limit)
	}
	return per
}
