package cluster

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// TestCheckAway: the last contact a data directory records decides
// whether a node may start; a contact file that cannot be read (damaged)
// is said in the log, not passed over in silence, as the check it
// guards is then skipped.
func TestCheckAway(t *testing.T) {
	now := time.Now()
	const grace = time.Hour
	for _, tc := range []struct {
		name    string
		content *string
		wantErr error
		warns   int
	}{
		{"no contact file", nil, nil, 0},
		{"recent contact", ptr(strconv.FormatInt(now.Add(-time.Minute).UnixMilli(), 10) + "\n"), nil, 0},
		{"away too long", ptr(strconv.FormatInt(now.Add(-2*grace).UnixMilli(), 10) + "\n"), ErrAwayTooLong, 0},
		{"damaged", ptr("zzzz\n"), nil, 1},
		{"empty", ptr(""), nil, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if tc.content != nil {
				if err := os.WriteFile(filepath.Join(dir, contactFile), []byte(*tc.content), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			core, logs := observer.New(zapcore.WarnLevel)
			err := CheckAway(dir, grace, false, now, zap.New(core))
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("CheckAway = %v, want %v", err, tc.wantErr)
			}
			if n := logs.FilterMessageSnippet("contact").Len(); n != tc.warns {
				t.Fatalf("%d warnings about the contact file, want %d: %v", n, tc.warns, logs.All())
			}
		})
	}
}

func ptr(s string) *string { return &s }
