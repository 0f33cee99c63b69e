package index

// Find returns the (origin, seq) whose record is at log position pos, if
// an origin's index holds one there: a binary search in each origin (its
// positions increase with its seqs). For the rare repair of a damaged
// record; safe from any goroutine.
func (o *Origins) Find(pos int64) (origin, seq uint64, ok bool) {
	o.mu.RLock()
	defer o.mu.RUnlock()
	for id, oi := range o.m {
		k, err := searchPos(oi.arr, pos)
		if err != nil || k >= oi.arr.len() {
			continue
		}
		if p, err := entryPos(oi.arr, k); err == nil && p == pos {
			return id, k, true
		}
	}
	return 0, 0, false
}

// Find returns the topic and the entry of the record at log position pos,
// if a topic index holds one there (a binary search in each topic). For
// the rare repair of a damaged record; safe from any goroutine.
func (t *Topics) Find(pos int64) (topic string, e Entry, ok bool) {
	for _, name := range t.Names() {
		ti := t.Get(name)
		if ti == nil {
			continue
		}
		k, err := ti.SearchPos(pos)
		if err != nil || k >= ti.Len() {
			continue
		}
		if e, err := ti.Entry(k); err == nil && e.Pos == pos {
			return name, e, true
		}
	}
	return "", Entry{}, false
}
