package wire

import "testing"

func TestEscapeSegment(t *testing.T) {
	for in, want := range map[string]string{
		".": "%2E", "..": "%2E%2E", "...": "...", "a/b": "a%2Fb", "a b": "a%20b", "é": "%C3%A9", "a%b": "a%25b", "?#": "%3F%23",
	} {
		if got := EscapeSegment(in); got != want {
			t.Errorf("EscapeSegment(%q) = %q, want %q", in, got, want)
		}
	}
}
