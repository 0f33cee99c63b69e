package mirror

import (
	"testing"

	"github.com/cachecast/cachecast/store/view"
)

// TestShrink: once the queue went unused for a heartbeat, shrink drops the
// arrays a burst grew past keepQueued, and keeps smaller ones and a queue
// that is not empty.
func TestShrink(t *testing.T) {
	big, small := keepQueued+1, keepQueued
	tests := []struct {
		name                     string
		pending, pendingLen      int // cap and len of the queue
		written, batch           int // caps of the scratch arrays
		wantPending, wantWritten bool
		wantBatch                bool // kept (true) or dropped
	}{
		{"all grown", big, 0, big, big, false, false, false},
		{"all small", small, 0, small, small, true, true, true},
		{"queue not empty", big, 1, small, big, true, true, false},
		{"only written grown", small, 0, big, small, true, false, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			vm := &Mirror{
				pending: make([]queued, tc.pendingLen, tc.pending),
				written: make([]view.Change, 0, tc.written),
			}
			batch := vm.shrink(make([]queued, 0, tc.batch))
			if got := vm.pending != nil; got != tc.wantPending {
				t.Errorf("pending kept %v, want %v", got, tc.wantPending)
			}
			if len(vm.pending) != tc.pendingLen {
				t.Errorf("pending has %d, want %d", len(vm.pending), tc.pendingLen)
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
