package tiering

import (
	"sync"
	"time"
)

// logEvery is the shortest interval between two log lines of one message
// from a hot failure path (a dead or full tier fails every block).
const logEvery = 10 * time.Second

// logLimiter rate-limits warnings by message: the first line of a message
// is logged at once, later ones at most once per logEvery with the number
// suppressed in between ("suppressed").
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

// logLimited logs a warning, rate-limited per message (see logLimiter).
func (s *Store) logLimited(msg string, args ...any) {
	ok, n := s.logLim.allow(msg, time.Now())
	if !ok {
		return
	}
	if n > 0 {
		args = append(args, "suppressed", n)
	}
	s.log.Warn(msg, args...)
}
