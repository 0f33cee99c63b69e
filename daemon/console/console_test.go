package console

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/cachecast/cachecast/daemon/internal/access"
)

// echo is a stand-in for the local API: it answers the role the console
// granted its caller, and the path it was given.
var echo = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	_, _ = io.WriteString(w, access.CallerFrom(r.Context()).Granted.String()+" "+r.URL.Path)
})

var metrics = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "metrics") })

const token = "0123456789abcdef-token"

// TestAccess: who the console admits, and as whom, on each kind of
// listener.
func TestAccess(t *testing.T) {
	for _, tc := range []struct {
		name     string
		token    string
		loopback bool
		method   string
		path     string
		host     string
		header   [2]string
		status   int
		has      string
	}{
		{"loopback, no token: an unknown caller", "", true, "GET", "/console/api/v1/fleet", "127.0.0.1:9100", [2]string{}, 200, "none /v1/fleet"},
		{"loopback, localhost", "", true, "GET", "/console/api/v1/fleet", "localhost:9100", [2]string{}, 200, "none /v1/fleet"},
		{"loopback, [::1]", "", true, "GET", "/console/api/v1/fleet", "[::1]:9100", [2]string{}, 200, "none /v1/fleet"},
		{"loopback, another Host (rebinding)", "", true, "GET", "/console/api/v1/fleet", "evil.example", [2]string{}, 403, "loopback Host"},
		{"loopback, the page", "", true, "GET", "/console/", "127.0.0.1", [2]string{}, 200, "<title>cachecast console</title>"},
		{"beyond loopback, no token: off", "", false, "GET", "/console/api/v1/fleet", "10.0.0.1:9100", [2]string{}, 403, "--console-token-file"},
		{"beyond loopback, no token: no page", "", false, "GET", "/console/", "10.0.0.1:9100", [2]string{}, 403, "--console-token-file"},
		{"beyond loopback, no token: metrics", "", false, "GET", "/metrics", "10.0.0.1:9100", [2]string{}, 200, "metrics"},
		{"token, none given", token, false, "GET", "/console/api/v1/fleet", "10.0.0.1", [2]string{}, 401, "token"},
		{"token, a wrong one", token, false, "GET", "/console/api/v1/fleet", "10.0.0.1", [2]string{"Authorization", "Bearer nope"}, 401, "token"},
		{"token, bearer: read", token, false, "GET", "/console/api/v1/fleet", "10.0.0.1", [2]string{"Authorization", "Bearer " + token}, 200, "read /v1/fleet"},
		{"token, cookie: read", token, false, "GET", "/console/api/v1/fleet", "10.0.0.1", [2]string{"Cookie", cookieName + "=" + token}, 200, "read /v1/fleet"},
		{"token on loopback too", token, true, "GET", "/console/api/v1/fleet", "127.0.0.1", [2]string{}, 401, "token"},
		{"token, no token: the sign-in form", token, false, "GET", "/console/", "10.0.0.1", [2]string{}, 200, `name="token"`},
		{"token, no token: no script", token, false, "GET", "/console/console.js", "10.0.0.1", [2]string{}, 401, "token"},
		{"a write to the page", "", true, "POST", "/console/", "127.0.0.1", [2]string{}, 405, "read-only"},
		{"/ redirects", "", true, "GET", "/", "127.0.0.1", [2]string{}, 302, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := New(Config{API: echo, Token: tc.token, Loopback: tc.loopback, Next: metrics})
			req := httptest.NewRequest(tc.method, "http://"+tc.host+tc.path, nil)
			if tc.header[0] != "" {
				req.Header.Set(tc.header[0], tc.header[1])
			}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if rec.Code != tc.status || !strings.Contains(rec.Body.String(), tc.has) {
				t.Fatalf("%d %q; want %d with %q", rec.Code, rec.Body.String(), tc.status, tc.has)
			}
		})
	}
}

// TestSignIn: the form sets the cookie to the right token only.
func TestSignIn(t *testing.T) {
	h := New(Config{API: echo, Token: token, Next: metrics})
	for _, tc := range []struct {
		tok    string
		cookie bool
		to     string
	}{{token, true, "/console/"}, {"wrong-token-0000000", false, "/console/?denied=1"}} {
		req := httptest.NewRequest("POST", "http://10.0.0.1/console/login", strings.NewReader(url.Values{"token": {tc.tok}}.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		cookies := rec.Result().Cookies()
		got := len(cookies) == 1 && cookies[0].Value == token && cookies[0].HttpOnly && cookies[0].SameSite == http.SameSiteStrictMode
		if rec.Code != http.StatusSeeOther || got != tc.cookie || rec.Header().Get("Location") != tc.to {
			t.Fatalf("sign in with %q: %d, cookies %v, to %q; want the cookie %t, to %q", tc.tok, rec.Code, cookies, rec.Header().Get("Location"), tc.cookie, tc.to)
		}
	}
}
