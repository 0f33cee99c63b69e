package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/cachecast/cachecast/client"
)

func TestPrintClocks(t *testing.T) {
	tests := []struct {
		name string
		cl   client.ClusterStatus
		want []string // lines, in order; none when empty
	}{
		{"all in time", client.ClusterStatus{Members: []client.ClusterMember{{Name: "a", Self: true}, {Name: "b"}}}, nil},
		{"a peer ahead", client.ClusterStatus{Members: []client.ClusterMember{{Name: "a", Self: true},
			{Name: "b", ClockAhead: true, ClockAheadSeconds: 3600, RefusedRecords: 7}}},
			[]string{"clock: b stamps its records 3600.0s ahead of this node's clock (beyond --max-clock-offset; 0 held, 7 offers refused)"}},
		{"this node behind", client.ClusterStatus{ClockBehind: true, Members: []client.ClusterMember{
			{Name: "b", ClockAhead: true, ClockAheadSeconds: 2, HeldRecords: 3}, {Name: "c", ClockAhead: true, ClockAheadSeconds: 2.5}}},
			[]string{"clock: b stamps its records 2.0s ahead", "clock: c stamps its records 2.5s ahead", "clock: WARNING: this node's clock is behind most of its peers"}},
		{"an old member", client.ClusterStatus{Members: []client.ClusterMember{{Name: "a", Self: true, Protocol: 4},
			{Name: "b", State: "alive", Protocol: 3, TooOld: true, HeldBack: 12}}},
			[]string{"upgrade: b speaks data protocol 3: writes with an expiry or a schedule are refused (fleet_too_old)",
				"upgrade: this node's records from seq 12 on are held back from b"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b bytes.Buffer
			printClocks(&b, &tt.cl)
			lines := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
			if b.Len() == 0 {
				lines = nil
			}
			if len(lines) != len(tt.want) {
				t.Fatalf("printed %q, want %d lines", b.String(), len(tt.want))
			}
			for i, w := range tt.want {
				if !strings.HasPrefix(lines[i], w) {
					t.Fatalf("line %d: %q, want it to start with %q", i, lines[i], w)
				}
			}
		})
	}
}
