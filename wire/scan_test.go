package wire

import (
	"encoding/json"
	"testing"
)

func TestDecodeResults(t *testing.T) {
	const one = `{"topic":"t","key":"k","origin":"00000000000000ab","seq":7,"hlc":"123","time":"2025-01-02T03:04:05.678Z","status":"ok"}`
	tests := []struct {
		name string
		body string
		fast bool // the scanner reads it (else encoding/json does)
		n    int
		err  bool
	}{
		{"one", `{"results":[` + one + `]}`, true, 1, false},
		{"two, spaced", " {\n \"results\" : [ " + one + " ,\n" + one + " ] }\n", true, 2, false},
		{"empty", `{"results":[]}`, true, 0, false},
		{"hlc number", `{"results":[{"hlc":123}]}`, true, 1, false},
		{"escaped key", `{"results":[{"key":"a\"b"}]}`, false, 1, false},
		{"unicode key", `{"results":[{"key":"é€"}]}`, true, 1, false},
		{"unknown field", `{"results":[{"replica":"n2"}]}`, false, 1, false},
		{"other top field", `{"warning":"x","results":[]}`, false, 0, false},
		{"case variant", `{"results":[{"KEY":"k"}]}`, false, 1, false},
		{"null", `{"results":null}`, false, 0, false},
		{"seq fraction", `{"results":[{"seq":1.5}]}`, false, 0, true},
		{"seq leading zero", `{"results":[{"seq":01}]}`, false, 0, true},
		{"hlc not a number", `{"results":[{"hlc":"x1"}]}`, false, 0, true},
		{"trailing garbage", `{"results":[]}x`, false, 0, true},
		{"truncated", `{"results":[` + one, false, 0, true},
		// encoding/json would read the key as U+FFFD, another key: refused.
		{"invalid utf-8", "{\"results\":[{\"key\":\"\xff\"}]}", false, 0, true},
		{"half a surrogate pair", `{"results":[{"key":"\udc00"}]}`, false, 0, true},
		{"surrogate pair", `{"results":[{"key":"\ud83d\udd11"}]}`, false, 1, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, fast := scanResults([]byte(tt.body))
			if fast != tt.fast {
				t.Errorf("scanner took it: %v, want %v", fast, tt.fast)
			}
			rs, err := DecodeResults([]byte(tt.body))
			if (err != nil) != tt.err || len(rs) != tt.n {
				t.Errorf("%d results, err %v; want %d, error %v", len(rs), err, tt.n, tt.err)
			}
		})
	}
	rs, _ := DecodeResults([]byte(`{"results":[` + one + `]}`))
	want := PutResult{Topic: "t", Key: "k", Origin: "00000000000000ab", Seq: 7, HLC: "123", Time: "2025-01-02T03:04:05.678Z", Status: "ok"}
	if rs[0] != want {
		t.Errorf("got %+v, want %+v", rs[0], want)
	}
}

// FuzzDecodeResults: whatever the scanner accepts, encoding/json reads
// the same way.
func FuzzDecodeResults(f *testing.F) {
	f.Add([]byte(`{"results":[{"topic":"t","key":"k","origin":"00000000000000ab","seq":7,"hlc":"123","time":"2025-01-02T03:04:05.678Z","status":"ok"}]}`))
	f.Add([]byte(`{"results":[{"topic":"t","seq":1},{"topic":"t","seq":2,"hlc":5}]}`))
	f.Add([]byte(` { "results" : [ ] } `))
	f.Add([]byte(`{"results":[{"key":"é","hlc":"0"}]}`))
	f.Add([]byte(`{"results":[{"seq":18446744073709551615}]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		fast, ok := scanResults(b)
		if !ok {
			return
		}
		var slow struct {
			Results []resultJSON `json:"results"`
		}
		if err := json.Unmarshal(b, &slow); err != nil {
			t.Fatalf("the scanner accepted %q, encoding/json refuses it: %v", b, err)
		}
		if len(fast) != len(slow.Results) {
			t.Fatalf("%q: %d results, encoding/json %d", b, len(fast), len(slow.Results))
		}
		for i := range fast {
			if fast[i] != slow.Results[i].result() {
				t.Fatalf("%q: result %d: %+v, encoding/json %+v", b, i, fast[i], slow.Results[i])
			}
		}
	})
}
