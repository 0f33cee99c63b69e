package wire

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"
)

// Each hand-written appender and scanner beside encoding/json doing the
// same work (impl=wire, impl=encoding-json): what the hand-written code
// buys, measured in the same run. The figures are per object.

func BenchmarkAppendString(b *testing.B) {
	s := `sku-12345/eu "quoted" key with a tab	and ünïcode`
	b.Run("impl=wire", func(b *testing.B) {
		b.ReportAllocs()
		buf := make([]byte, 0, 128)
		for b.Loop() {
			buf = AppendString(buf[:0], s)
		}
	})
	b.Run("impl=encoding-json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := json.Marshal(s); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func benchResults() []Published {
	rs := make([]Published, 1000)
	for i := range rs {
		rs[i] = Published{Topic: "bench", Key: fmt.Sprintf("bench-%08d", i), Origin: 0x00c0ffee12345678, Seq: uint64(i + 1),
			HLC: 117703579866824704, Millis: 1796014097089, Status: StatusOK}
	}
	return rs
}

// BenchmarkAppendResults: the daemon's answer to a batch of 1000.
func BenchmarkAppendResults(b *testing.B) {
	rs := benchResults()
	b.Run("impl=wire", func(b *testing.B) {
		b.SetBytes(int64(len(rs)))
		b.ReportAllocs()
		buf := make([]byte, 0, 200_000)
		for b.Loop() {
			buf = AppendResults(buf[:0], rs, true)
		}
	})
	b.Run("impl=encoding-json", func(b *testing.B) {
		b.SetBytes(int64(len(rs)))
		b.ReportAllocs()
		for b.Loop() {
			prs := make([]PutResult, len(rs))
			for i := range rs {
				prs[i] = rs[i].putResult()
			}
			if _, err := json.Marshal(struct {
				Results []PutResult `json:"results"`
			}{prs}); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkDecodeResults: the client reading that answer.
func BenchmarkDecodeResults(b *testing.B) {
	body := AppendResults(nil, benchResults(), true)
	b.Run("impl=wire", func(b *testing.B) {
		b.SetBytes(1000)
		b.ReportAllocs()
		for b.Loop() {
			if rs, err := DecodeResults(body); err != nil || len(rs) != 1000 {
				b.Fatal(err)
			}
		}
	})
	b.Run("impl=encoding-json", func(b *testing.B) {
		b.SetBytes(1000)
		b.ReportAllocs()
		for b.Loop() {
			var out struct {
				Results []PutResult `json:"results"`
			}
			if err := json.Unmarshal(body, &out); err != nil || len(out.Results) != 1000 {
				b.Fatal(err)
			}
		}
	})
}

// deliveryJSON is a subscription line as encoding/json would write it.
type deliveryJSON struct {
	Offset uint64 `json:"offset"`
	Topic  string `json:"topic"`
	Key    string `json:"key"`
	Tag    string `json:"tag"`
	Value  string `json:"value"`
	Delete bool   `json:"delete"`
	Origin string `json:"origin"`
	Seq    uint64 `json:"seq"`
	HLC    string `json:"hlc,string"`
	Time   string `json:"time"`
}

// BenchmarkAppendDelivery: one line of a subscription stream.
func BenchmarkAppendDelivery(b *testing.B) {
	value := []byte(strings.Repeat("v", 100))
	d := Delivery{Offset: 12345, Topic: []byte("prices"), Key: []byte("sku-12345"), Value: value,
		Origin: 0xc0ffee12345678, Seq: 777, HLC: 117703579866824704, Time: time.UnixMilli(1796013297089)}
	b.Run("impl=wire", func(b *testing.B) {
		b.ReportAllocs()
		buf := make([]byte, 0, 512)
		for b.Loop() {
			buf = AppendDelivery(buf[:0], &d)
		}
	})
	b.Run("impl=encoding-json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := json.Marshal(deliveryJSON{Offset: d.Offset, Topic: string(d.Topic), Key: string(d.Key), Tag: string(d.Tag),
				Value: string(d.Value), Origin: FormatOrigin(d.Origin), Seq: d.Seq, HLC: fmt.Sprint(d.HLC),
				Time: d.Time.UTC().Format(TimeLayout)}); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// messageJSON is a message object as encoding/json would write it.
type messageJSON struct {
	Key    string `json:"key,omitempty"`
	Tag    string `json:"tag,omitempty"`
	Value  string `json:"value,omitempty"`
	Delete bool   `json:"delete,omitempty"`
}

// BenchmarkAppendMessage: the client encoding a batch of 1000 messages.
func BenchmarkAppendMessage(b *testing.B) {
	keys := make([]string, 1000)
	for i := range keys {
		keys[i] = fmt.Sprintf("bench-%08d", i)
	}
	value := []byte(strings.Repeat("x", 100))
	b.Run("impl=wire", func(b *testing.B) {
		b.SetBytes(int64(len(keys)))
		b.ReportAllocs()
		buf := make([]byte, 0, 200_000)
		for b.Loop() {
			buf = buf[:0]
			for _, k := range keys {
				buf = append(AppendMessage(buf, k, "", value, false), '\n')
			}
		}
	})
	b.Run("impl=encoding-json", func(b *testing.B) {
		b.SetBytes(int64(len(keys)))
		b.ReportAllocs()
		buf := make([]byte, 0, 200_000)
		for b.Loop() {
			buf = buf[:0]
			for _, k := range keys {
				m, err := json.Marshal(messageJSON{Key: k, Value: string(value)})
				if err != nil {
					b.Fatal(err)
				}
				buf = append(append(buf, m...), '\n')
			}
		}
	})
}

// BenchmarkAppendUnixMilli: a result's "time", against time's formatting.
func BenchmarkAppendUnixMilli(b *testing.B) {
	ms := time.Date(2026, 12, 5, 8, 48, 17, 89e6, time.UTC).UnixMilli()
	buf := make([]byte, 0, 64)
	b.Run("impl=wire", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			buf = AppendUnixMilli(buf[:0], ms)
		}
	})
	b.Run("impl=time", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			buf = time.UnixMilli(ms).UTC().AppendFormat(buf[:0], TimeLayout)
		}
	})
}
