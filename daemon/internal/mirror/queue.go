package mirror

// queueBlock is how many changes a block of the queue holds (46 KB).
const queueBlock = 256

// changeQueue is the mirror's queue of changes waiting for the file, in
// blocks of queueBlock: it grows by a block at a time, never by copying
// what it holds, and a block drained is kept for the next burst (spare)
// until the queue goes unused (trim). As one array it grew by copies of
// itself at each burst (every growth of the file's writer queues the
// changes that arrive meanwhile): at 1M keys loaded by redis-cli --pipe,
// 307 of the 867 bytes allocated a SET (BENCHMARKS.md, "Memory per key").
// end pushes under the mirror's mu; drain takes the blocks and gives
// them back.
type changeQueue struct {
	blocks [][]queued // in order, each but the last full
	n      int        // changes in blocks
	spare  [][]queued // empty blocks
}

// push appends c.
func (q *changeQueue) push(c queued) {
	if k := len(q.blocks); k == 0 || len(q.blocks[k-1]) == queueBlock {
		var b []queued
		if s := len(q.spare); s > 0 {
			b, q.spare[s-1] = q.spare[s-1], nil
			q.spare = q.spare[:s-1]
		} else {
			b = make([]queued, 0, queueBlock)
		}
		q.blocks = append(q.blocks, b)
	}
	last := &q.blocks[len(q.blocks)-1]
	*last = append(*last, c)
	q.n++
}

// take moves the queued blocks into into (emptied first) and returns
// it; the queue is empty then.
func (q *changeQueue) take(into [][]queued) [][]queued {
	clear(into)
	into = append(into[:0], q.blocks...)
	clear(q.blocks)
	q.blocks, q.n = q.blocks[:0], 0
	return into
}

// giveBack keeps the blocks of taken, every one applied, as spares:
// emptied, so that they hold no value.
func (q *changeQueue) giveBack(taken [][]queued) {
	for _, b := range taken {
		clear(b)
		q.spare = append(q.spare, b[:0])
	}
}

// trim drops the spare blocks past keep blocks' worth of changes (the
// queue went unused: the burst is over).
func (q *changeQueue) trim(keep int) {
	k := keep / queueBlock
	if len(q.spare) > k {
		clear(q.spare[k:])
		q.spare = q.spare[:k]
	}
	if q.n == 0 && cap(q.blocks) > k {
		q.blocks = nil
	}
}

// reset empties the queue and drops its blocks (a mirror starting over).
func (q *changeQueue) reset() { *q = changeQueue{} }
