package client

import (
	"fmt"
	"strings"
	"testing"
)

// The client's own cost per message in a batch: bench must measure the
// daemon, not the client, so these must stay far below a daemon's
// microsecond or so per message.

func BenchmarkEncodeBatch(b *testing.B) {
	msgs := make([]Message, 1000)
	value := []byte(strings.Repeat("x", 100))
	for i := range msgs {
		msgs[i] = Message{Key: fmt.Sprintf("bench-%08d", i), Value: value}
	}
	b.SetBytes(int64(len(msgs) * len(value)))
	b.ReportAllocs()
	buf := make([]byte, 0, 200_000)
	for b.Loop() {
		buf = buf[:0]
		for i := range msgs {
			buf = appendMessage(buf, &msgs[i])
			buf = append(buf, '\n')
		}
	}
}

func BenchmarkDecodeResults(b *testing.B) {
	var sb strings.Builder
	sb.WriteString(`{"results":[`)
	for i := range 1000 {
		if i > 0 {
			sb.WriteByte(',')
		}
		fmt.Fprintf(&sb, `{"topic":"bench","key":"bench-%08d","origin":"00c0ffee12345678","seq":%d,"hlc":"117703579866824704","time":"2026-11-30T04:48:17.089Z","status":"ok"}`, i, i+1)
	}
	sb.WriteString(`]}`)
	body := []byte(sb.String())
	b.SetBytes(1000)
	b.ReportAllocs()
	for b.Loop() {
		ws, err := decodeResults(body)
		if err != nil || len(ws) != 1000 {
			b.Fatal(err)
		}
		if _, err := convertResults(ws); err != nil {
			b.Fatal(err)
		}
	}
}
