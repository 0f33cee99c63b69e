package mirror

import (
	"testing"

	"github.com/cachecast/cachecast/store/view"
)

// TestShrink: once the queue went unused for a heartbeat, shrink drops the
// spare blocks and the batch array a burst grew past keepQueued, and
// keeps smaller ones, a queue that is not empty, and written (made once,
// for writtenChunk changes).
func TestShrink(t *testing.T) {
	bigBlocks, smallBlocks := keepQueued/queueBlock+1, keepQueued/queueBlock
	tests := []struct {
		name                string
		spare, queued       int // spare blocks, changes queued
		batch               int // cap of the batch array
		wantSpare, wantKept int // spare blocks left, changes still queued
		wantBatch           bool
	}{
		{"all grown", bigBlocks, 0, bigBlocks, smallBlocks, 0, false},
		{"all small", smallBlocks, 0, smallBlocks, smallBlocks, 0, true},
		{"queue not empty", bigBlocks, 3 * queueBlock, bigBlocks, bigBlocks - 3, 3 * queueBlock, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			vm := &Mirror{written: make([]view.Change, 0, writtenChunk)}
			for range tc.spare {
				vm.pending.spare = append(vm.pending.spare, make([]queued, 0, queueBlock))
			}
			for range tc.queued {
				vm.pending.push(queued{})
			}
			batch := vm.shrink(make([][]queued, 0, tc.batch))
			if len(vm.pending.spare) != tc.wantSpare {
				t.Errorf("%d spare blocks, want %d", len(vm.pending.spare), tc.wantSpare)
			}
			if vm.pending.n != tc.wantKept {
				t.Errorf("%d queued, want %d", vm.pending.n, tc.wantKept)
			}
			if cap(vm.written) != writtenChunk {
				t.Errorf("written has room for %d, want %d", cap(vm.written), writtenChunk)
			}
			if got := batch != nil; got != tc.wantBatch {
				t.Errorf("batch kept %v, want %v", got, tc.wantBatch)
			}
		})
	}
}
