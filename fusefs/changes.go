package fusefs

import "github.com/ctxmem/ctxmemd/tiering"

// changed tells Options.OnChange that the names or the completeness of
// the file whose object is id may have changed.
func (f *fsys) changed(id tiering.ObjectID) {
	if fn := f.opts.OnChange; fn != nil {
		fn(id)
	}
}

// Writing reports whether the file whose object is id is open for
// writing (an engine still filling it). False for unknown ids.
func (s *Server) Writing(id tiering.ObjectID) bool {
	t := &s.fsys.t
	t.mu.RLock()
	n := t.byObj[id]
	t.mu.RUnlock()
	if n == nil {
		return false
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.writers > 0
}
