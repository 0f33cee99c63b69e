package mirror

import (
	"testing"

	"github.com/cachecast/cachecast/store/view"
)

// TestShrink: once the queue went unused for a heartbeat, shrink drops the
// spare blocks and the arrays a burst grew past keepQueued, and keeps
// smaller ones and a queue that is not empty.
func TestShrink(t *testing.T) {
	bigBlocks, smallBlocks := keepQueued/queueBlock+1, keepQueued/queueBlock
	tests := []struct {
		name                string
		spare, queued       int // spare blocks, changes queued
		written, batch      int // caps of the scratch arrays
		wantSpare, wantKept int // spare blocks left, changes still queued
		wantWritten         bool
		wantBatch           bool // kept (true) or dropped
	}{
		{"all grown", bigBlocks, 0, keepQueued + 1, bigBlocks + 1, smallBlocks, 0, false, false},
		{"all small", smallBlocks, 0, keepQueued, smallBlocks, smallBlocks, 0, true, true},
		{"queue not empty", bigBlocks, 3 * queueBlock, keepQueued, bigBlocks + 1, bigBlocks - 3, 3 * queueBlock, true, false},
		{"only written grown", 1, 0, keepQueued + 1, 1, 1, 0, false, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			vm := &Mirror{written: make([]view.Change, 0, tc.written)}
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
			if got := vm.written != nil; got != tc.wantWritten {
				t.Errorf("written kept %v, want %v", got, tc.wantWritten)
			}
			if got := batch != nil; got != tc.wantBatch {
				t.Errorf("batch kept %v, want %v", got, tc.wantBatch)
			}
		})
	}
}
