package nbd

// Replies are sent by flat combining: whoever finds the socket idle writes
// every reply queued so far in one writev, and keeps doing so until the
// queue is empty; others only queue. The reader queues without writing
// (send with now=false) and flushes before it would block, so a burst of
// requests answered inline costs one writev.

// send queues r's reply; with now set it also writes the queue unless
// another goroutine is writing it.
func (c *conn) send(r *op, now bool) {
	c.wmu.Lock()
	c.pending = append(c.pending, r)
	if c.writing || !now {
		c.wmu.Unlock()
		return
	}
	c.writeLocked()
}

// flush writes the queued replies unless another goroutine is writing
// them.
func (c *conn) flush() {
	c.wmu.Lock()
	if c.writing || len(c.pending) == 0 {
		c.wmu.Unlock()
		return
	}
	c.writeLocked()
}

// writeLocked writes queued replies until none is left. It is called with
// c.wmu held and returns with it released. After a write error (the client
// is gone) replies are dropped and the socket is closed so that the reader
// stops.
func (c *conn) writeLocked() {
	c.writing = true
	for len(c.pending) > 0 {
		batch := c.pending
		c.pending = c.spare[:0]
		failed := c.wfailed
		c.wmu.Unlock()

		if !failed {
			bufs := c.bufs[:0]
			for _, r := range batch {
				bufs = append(bufs, r.hdr)
				if len(r.body) > 0 {
					bufs = append(bufs, r.body)
				}
				if len(r.tail) > 0 {
					bufs = append(bufs, r.tail)
				}
			}
			c.bufs = bufs
			v := bufs // WriteTo consumes its receiver; keep c.bufs' backing array
			if _, err := v.WriteTo(c.nc); err != nil {
				failed = true
				c.log.Debug("reply write failed; dropping replies", "err", err)
				c.nc.Close()
			}
			clear(bufs) // drop references to buffers about to be recycled
		}
		for i, r := range batch {
			c.release(r)
			batch[i] = nil
		}

		c.wmu.Lock()
		c.wfailed = failed
		c.spare = batch[:0]
	}
	c.writing = false
	c.wmu.Unlock()
}

// release frees what r holds: its buffers and its budget.
func (c *conn) release(r *op) {
	if r.payload != nil {
		c.srv.bufs.put(r.payload)
	}
	if r.data != nil {
		c.srv.bufs.put(r.data)
	}
	c.mem.release(r.cost)
	c.srv.putOp(r)
}
