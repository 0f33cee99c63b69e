package codec

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"
)

var (
	testLimits   = Limits{MaxBulk: 64, MaxFrame: 256, MaxArgs: 4, MaxLine: 64}
	unauthLimits = Limits{MaxBulk: 16 << 10, MaxFrame: 16 << 10, MaxArgs: 10, MaxLine: 16 << 10, Unauth: true}
)

func TestParseCommand(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		args     []string
		n        int
		need     int // > 0: incomplete, at least this much
		err      string
		lim      *Limits // nil: testLimits
	}{
		{name: "get", in: "*2\r\n$3\r\nGET\r\n$1\r\nk\r\n", args: []string{"GET", "k"}, n: 20},
		{name: "two in a row", in: "*1\r\n$4\r\nPING\r\n*1\r\n$4\r\nPING\r\n", args: []string{"PING"}, n: 14},
		{name: "empty bulk", in: "*2\r\n$3\r\nGET\r\n$0\r\n\r\n", args: []string{"GET", ""}, n: 19},
		{name: "binary bulk", in: "*1\r\n$4\r\n\x00\r\n\xff\r\n", args: []string{"\x00\r\n\xff"}, n: 14},
		{name: "inline", in: "SET  a\tb\r\nrest", args: []string{"SET", "a", "b"}, n: 10},
		{name: "inline LF", in: "PING\n", args: []string{"PING"}, n: 5},
		{name: "inline quotes", in: "SET \"a b\" 'c\\'d'\r\n", args: []string{"SET", "a b", "c'd"}, n: 18},
		{name: "inline escapes", in: "ECHO \"\\x41\\n\\q\" x\"y z\"\n", args: []string{"ECHO", "A\nq", "xy z"}, n: 23},
		{name: "inline empty quotes", in: "ECHO \"\" ''\n", args: []string{"ECHO", "", ""}, n: 11},
		{name: "inline NUL", in: "ECHO a\x00 b\n", args: []string{"ECHO", "a\x00", "b"}, n: 10},
		{name: "inline unbalanced", in: "ECHO \"a\r\n", err: "Protocol error: unbalanced quotes in request"},
		{name: "inline quote then text", in: "ECHO 'a'b\r\n", err: "unbalanced quotes"},
		{name: "empty array", in: "*0\r\n", args: []string{}, n: 4},
		{name: "null array", in: "*-1\r\n", args: []string{}, n: 5},
		{name: "nothing", in: "", need: 1},
		{name: "half count", in: "*2\r", need: 4},
		{name: "half bulk header", in: "*2\r\n$3\r\nGET\r\n$1", need: 16},
		{name: "half bulk", in: "*2\r\n$3\r\nGET\r\n$10\r\nab", need: 30},
		{name: "half inline", in: "PING", need: 5},
		{name: "bad count", in: "*x\r\n", err: "Protocol error: invalid multibulk length"},
		{name: "count LF only", in: "*1\n", err: "Protocol error: invalid multibulk length"},
		{name: "count too long", in: "*12345678901\r\n", err: "Protocol error: invalid multibulk length"},
		{name: "count -10 (skipped, as Redis does)", in: "*-10\r\n", args: []string{}, n: 6},
		{name: "bulk length -10", in: "*1\r\n$-10\r\n", err: "Protocol error: invalid bulk length"},
		{name: "bulk length not a number", in: "*1\r\n$blabla\r\n", err: "Protocol error: invalid bulk length"},
		{name: "payload header not $", in: "*3\r\n$3\r\nSET\r\n$1\r\nx\r\nfooz\r\n", err: "Protocol error: expected '$', got 'f'"},
		{name: "too many args", in: "*5\r\n", err: "Protocol error: invalid multibulk length: 5 arguments is more than the 4"},
		{name: "not a bulk", in: "*1\r\n:1\r\n", err: "expected '$', got ':'"},
		{name: "null bulk", in: "*1\r\n$-1\r\n", err: "invalid bulk length"},
		{name: "bulk too large", in: "*1\r\n$65\r\n", err: "Protocol error: invalid bulk length: a bulk string of 65 bytes is over --max-value-size (64 bytes)"},
		{name: "frame too large", in: "*4\r\n$60\r\n" + strings.Repeat("a", 60) + "\r\n$60\r\n" + strings.Repeat("a", 60) + "\r\n$60\r\n" + strings.Repeat("a", 60) + "\r\n$60\r\n", err: "over --max-body-size"},
		{name: "bulk without CRLF", in: "*1\r\n$1\r\nab\r\n", err: "bulk string not followed by CRLF"},
		{name: "inline too long", in: strings.Repeat("a", 65), err: "too big inline request"},
		{name: "inline too many args", in: "a b c d e\r\n", err: "too many arguments"},
		// A client that must authenticate: Redis's bounds and words, and
		// a command of 16 KiB at most (the resp package's strangers).
		{name: "unauthenticated AUTH", lim: &unauthLimits, in: "*3\r\n$4\r\nAUTH\r\n$1\r\nu\r\n$1\r\np\r\n", args: []string{"AUTH", "u", "p"}, n: 28},
		{name: "unauthenticated 11 args", lim: &unauthLimits, in: "*11\r\n", err: "Protocol error: unauthenticated multibulk length"},
		{name: "unauthenticated bulk", lim: &unauthLimits, in: "*1\r\n$16385\r\n", err: "Protocol error: unauthenticated bulk length"},
		{name: "unauthenticated frame", lim: &unauthLimits, in: "*2\r\n$9000\r\n" + strings.Repeat("a", 9000) + "\r\n$9000\r\n",
			err: "Protocol error: unauthenticated command of more than 16384 bytes"},
		{name: "unauthenticated inline filling the frame", lim: &unauthLimits, in: strings.Repeat("a", 16<<10),
			err: "Protocol error: unauthenticated command of more than 16384 bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lim := tc.lim
			if lim == nil {
				lim = &testLimits
			}
			args, n, need, err := Parse([]byte(tc.in), nil, lim)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tc.need > 0 {
				if n != 0 || need < tc.need {
					t.Fatalf("n %d need %d, want incomplete needing %d", n, need, tc.need)
				}
				return
			}
			got := []string{}
			for _, a := range args {
				got = append(got, string(a))
			}
			if n != tc.n || fmt.Sprint(got) != fmt.Sprint(tc.args) {
				t.Fatalf("args %q n %d, want %q n %d", got, n, tc.args, tc.n)
			}
		})
	}
}

// FuzzParse feeds the command reader arbitrary bytes: it never panics,
// never reads past what it says it took, takes nothing on an error or an
// incomplete command, and what it parses is within its limits; parsed
// again from the bytes it took alone, a command reads the same.
func FuzzParse(f *testing.F) {
	for _, seed := range []string{
		"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n",
		"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$0\r\n\r\n*1\r\n$4\r\nPING\r\n",
		"SET \"a b\" 'c\\'d' \"\\x41\"\r\n",
		"*-1\r\n",
		"*1\r\n$-1\r\n",
		"*2\r\n$3\r\nGET\r\n$10\r\nab",
		"*12345678901\r\n",
		"ECHO 'a'b\r\n",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		args, n, need, err := Parse(b, nil, &testLimits)
		switch {
		case err != nil:
			var pe *Error
			if !errors.As(err, &pe) || n != 0 {
				t.Fatalf("error %v (%T) with n %d", err, err, n)
			}
			return
		case n == 0:
			if need <= len(b) {
				t.Fatalf("incomplete, needing %d of %d bytes already there", need, len(b))
			}
			return
		case n > len(b):
			t.Fatalf("took %d of %d bytes", n, len(b))
		}
		if len(args) > testLimits.MaxArgs {
			t.Fatalf("%d arguments, over the limit %d", len(args), testLimits.MaxArgs)
		}
		total := 0
		for _, a := range args {
			if len(a) > testLimits.MaxBulk {
				t.Fatalf("an argument of %d bytes, over the limit %d", len(a), testLimits.MaxBulk)
			}
			total += len(a)
		}
		if total > testLimits.MaxFrame {
			t.Fatalf("a command of %d bytes, over the limit %d", total, testLimits.MaxFrame)
		}
		again, n2, _, err := Parse(bytes.Clone(b[:n]), nil, &testLimits)
		if err != nil || n2 != n || fmt.Sprintf("%q", again) != fmt.Sprintf("%q", args) {
			t.Fatalf("the %d bytes it took parse again as %q, %d, %v; first %q", n, again, n2, err, args)
		}
	})
}
