// Package console is cachecastd's operator console: a read-only page
// (plain HTML, CSS and JavaScript embedded in the binary, no build step,
// nothing fetched from elsewhere) served under /console on the metrics
// listener, and the local API's read routes it calls, under
// /console/api (GET /console/api/v1/fleet is GET /v1/fleet of the local
// API, answered by the same handlers: `cachecast` and the page read the
// same JSON).
//
// Who may read it. The metrics listener is TCP: its callers have no uid
// for the local API's roles to check. Without a token (Config.Token,
// from --console-token-file) the console is served only when the listener
// is loopback, to requests whose Host names loopback (a page elsewhere
// that rebinds its name to 127.0.0.1 is refused), and its caller is
// unknown, as a TCP caller of the Redis door is: the local API's reads are
// answered while the read role is open to anyone (--read-uids and
// --read-gids unset), and refused otherwise. With a token every console
// request must carry it (an Authorization: Bearer header, or the cookie
// that the page's sign-in form sets), on any address, and a caller that
// does is granted the read role. Beyond loopback without a token the
// console is refused, whatever the address.
//
// Streams (the Traffic view's subscriptions) are bounded by MaxStreams.
package console

import (
	"crypto/subtle"
	"embed"
	"io/fs"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/cachecast/cachecast/daemon/internal/access"
	"github.com/cachecast/cachecast/wire"
)

//go:embed assets
var assets embed.FS

// cookieName is the cookie the sign-in form sets to the token.
const cookieName = "cachecast_console"

// MaxStreams bounds the console's open subscription streams on one node.
const MaxStreams = 16

// Config is what the console is made of.
type Config struct {
	// API is the local API's read routes (httpapi.Server.ReadOnly).
	API http.Handler
	// Token is the credential every console request must carry; empty:
	// none, and then the console is served on a loopback listener only.
	Token string
	// Loopback: the listener binds loopback addresses only.
	Loopback bool
	// Next serves every path outside the console's (/metrics).
	Next http.Handler
}

// New is the metrics listener's handler with the console: / redirects to
// /console/, /console/ and its files are the page, /console/api/ the
// read routes; any other path goes to cfg.Next.
func New(cfg Config) http.Handler {
	h := &handler{cfg: cfg, streams: make(chan struct{}, MaxStreams)}
	static, _ := fs.Sub(assets, "assets")
	h.files = http.StripPrefix("/console/", http.FileServerFS(static))
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/console/", http.StatusFound)
	})
	mux.HandleFunc("GET /console", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/console/", http.StatusMovedPermanently)
	})
	mux.HandleFunc("/console/", h.page)
	mux.HandleFunc("POST /console/login", h.login)
	mux.Handle("/console/api/", http.StripPrefix("/console/api", http.HandlerFunc(h.api)))
	mux.Handle("/", cfg.Next)
	return mux
}

type handler struct {
	cfg     Config
	files   http.Handler
	streams chan struct{} // a slot per open stream
}

// refusal is why r may not be served (a status and a message), or 0.
// signedIn reports whether it carried the token.
func (h *handler) refusal(r *http.Request) (status int, msg string, signedIn bool) {
	if h.cfg.Token == "" {
		if !h.cfg.Loopback {
			return http.StatusForbidden, "the console is off on a --metrics-addr beyond loopback without --console-token-file", false
		}
		if !loopbackHost(r.Host) {
			return http.StatusForbidden, "the console without a token answers only to a loopback Host (localhost, 127.0.0.1, [::1])", false
		}
		return 0, "", false
	}
	if tok := presented(r); tok == "" || subtle.ConstantTimeCompare([]byte(tok), []byte(h.cfg.Token)) != 1 {
		return http.StatusUnauthorized, "the console needs its token (--console-token-file): sign in on /console/, or send Authorization: Bearer <token>", false
	}
	return 0, "", true
}

// presented is the token a request carries: its bearer header, else its
// cookie.
func presented(r *http.Request) string {
	if tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok {
		return strings.TrimSpace(tok)
	}
	if c, err := r.Cookie(cookieName); err == nil {
		return c.Value
	}
	return ""
}

// loopbackHost reports whether a Host header names this machine's
// loopback: localhost or a loopback IP, with or without a port.
func loopbackHost(host string) bool {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.Trim(host, "[]")
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// page serves the page and its files; without the token, the sign-in
// form instead of the page.
func (h *handler) page(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "the console is read-only", http.StatusMethodNotAllowed)
		return
	}
	status, msg, _ := h.refusal(r)
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'")
	switch {
	case status == http.StatusUnauthorized && (r.URL.Path == "/console/" || r.URL.Path == "/console/index.html"):
		r2 := r.Clone(r.Context())
		r2.URL.Path = "/console/login.html"
		h.files.ServeHTTP(w, r2)
	case status == http.StatusUnauthorized && r.URL.Path != "/console/login.html" && !strings.HasSuffix(r.URL.Path, ".css"):
		http.Error(w, msg, status)
	case status == http.StatusForbidden:
		http.Error(w, msg, status)
	default:
		h.files.ServeHTTP(w, r)
	}
}

// login sets the cookie to the token posted, when it is the token.
func (h *handler) login(w http.ResponseWriter, r *http.Request) {
	if h.cfg.Token == "" {
		http.Redirect(w, r, "/console/", http.StatusSeeOther)
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, 4<<10)
	tok := strings.TrimSpace(r.PostFormValue("token"))
	if subtle.ConstantTimeCompare([]byte(tok), []byte(h.cfg.Token)) != 1 {
		time.Sleep(500 * time.Millisecond) // slows a guesser down
		http.Redirect(w, r, "/console/?denied=1", http.StatusSeeOther)
		return
	}
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: tok, Path: "/console/", HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
	http.Redirect(w, r, "/console/", http.StatusSeeOther)
}

// api serves the local API's read routes to an admitted caller.
func (h *handler) api(w http.ResponseWriter, r *http.Request) {
	status, msg, signedIn := h.refusal(r)
	if status != 0 {
		writeError(w, status, wire.Errorf(wire.CodeForbidden, "%s", msg))
		return
	}
	if strings.HasSuffix(r.URL.Path, "/subscribe") {
		select {
		case h.streams <- struct{}{}:
			defer func() { <-h.streams }()
		default:
			w.Header().Set("Retry-After", "1")
			writeError(w, http.StatusServiceUnavailable, wire.Errorf(wire.CodeBusy, "the console's %d streams are all open on this node", MaxStreams))
			return
		}
	}
	c := access.Caller{}
	if signedIn {
		c.Granted = access.RoleRead
	}
	h.cfg.API.ServeHTTP(w, r.WithContext(access.WithCaller(r.Context(), c)))
}

// writeError answers e as the local API answers its errors.
func writeError(w http.ResponseWriter, status int, e *wire.Error) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(append(wire.AppendError(nil, e), '\n'))
}
