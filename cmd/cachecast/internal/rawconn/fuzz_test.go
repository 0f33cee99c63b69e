package rawconn

import (
	"bufio"
	"bytes"
	"io"
	"net/http"
	"testing"
)

// FuzzReadAnswer: no input panics the raw answer reader, and what it
// accepts net/http reads the same way (status and body).
func FuzzReadAnswer(f *testing.F) {
	f.Add([]byte("HTTP/1.1 200 OK\r\nContent-Length: 5\r\nCachecast-Seq: 3\r\n\r\nhello"))
	f.Add([]byte("HTTP/1.1 404 Not Found\r\nContent-Type: application/json\r\nContent-Length: 52\r\n\r\n" +
		`{"error":{"code":"not_found","message":"no such key"}}`))
	f.Add([]byte("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n"))
	f.Add([]byte("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3;ext=1\r\nabc\r\n0\r\nT: v\r\n\r\n"))
	f.Add([]byte("HTTP/1.1 204 No Content\r\nConnection: close\r\n\r\n"))
	f.Add([]byte("HTTP/1.1 200\nContent-Length: 0\n\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		r := bufio.NewReader(bytes.NewReader(data))
		status, h, err := readHead(r)
		if err != nil {
			return
		}
		body, err := readBody(r, status, h, nil)
		if err != nil {
			return
		}
		resp, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(data)), nil)
		if err != nil {
			t.Fatalf("accepted %q; net/http refuses it: %v", data, err)
		}
		defer resp.Body.Close()
		want, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatalf("accepted %q; net/http cannot read its body: %v", data, err)
		}
		if resp.StatusCode != status || !bytes.Equal(body, want) {
			t.Fatalf("%q: status %d body %q; net/http: %d %q", data, status, body, resp.StatusCode, want)
		}
	})
}
