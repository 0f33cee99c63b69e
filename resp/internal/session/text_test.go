package session

import (
	"strings"
	"testing"
)

// A hash is a topic only within the API's name limits (wire.MaxTopicLen,
// 128 bytes), not the record format's 65535: a longer name is an empty
// hash, as an invalid one is.
func TestTopicOf(t *testing.T) {
	for _, tc := range []struct {
		name, want string
	}{
		{"prices", "prices"},
		{"A.b_c-9", "A.b_c-9"},
		{strings.Repeat("t", 128), strings.Repeat("t", 128)},
		{strings.Repeat("t", 129), ""},
		{strings.Repeat("t", 65535), ""},
		{"", ""},
		{"with space", ""},
		{"ünïcode", ""},
		{"a:b", ""},
	} {
		if got := TopicOf([]byte(tc.name)); got != tc.want {
			t.Errorf("TopicOf(%.20q, %d bytes) = %.20q; want %.20q", tc.name, len(tc.name), got, tc.want)
		}
	}
}
