package tiering

import (
	"fmt"
	"sync"
	"time"
)

// logEvery is the shortest interval between two log lines of one message
// from a hot failure path (a dead or full tier fails every block).
const logEvery = 10 * time.Second

// logLimiter rate-limits warnings by key (a message, and its tier): the
// first line of a key is logged at once, later ones at most once per
// logEvery with the number suppressed in between ("suppressed").
type logLimiter struct {
	mu   sync.Mutex
	last map[string]*limitState
}

type limitState struct {
	at         time.Time
	suppressed int
}

// allow reports whether msg may be logged now and how many lines of it
// were suppressed since the last one logged.
func (l *logLimiter) allow(msg string, now time.Time) (bool, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.last == nil {
		l.last = make(map[string]*limitState)
	}
	st := l.last[msg]
	if st == nil {
		l.last[msg] = &limitState{at: now}
		return true, 0
	}
	if now.Sub(st.at) < logEvery {
		st.suppressed++
		return false, 0
	}
	n := st.suppressed
	st.at, st.suppressed = now, 0
	return true, n
}

// logLimited logs a warning, rate-limited per message and tier (see
// logLimiter; the tier is the value of a "tier" attribute in args, if
// any): one tier's failures are never counted as suppressed lines of
// another's, so a line names the tier that failed.
func (s *Store) logLimited(msg string, args ...any) {
	key := msg
	for i := 0; i+1 < len(args); i += 2 {
		if a, ok := args[i].(string); ok && a == "tier" {
			key = fmt.Sprint(msg, "\x00", args[i+1])
			break
		}
	}
	ok, n := s.logLim.allow(key, time.Now())
	if !ok {
		return
	}
	if n > 0 {
		args = append(args, "suppressed", n)
	}
	s.log.Warn(msg, args...)
}
