package wire

import "net/url"

// EscapeSegment escapes a name (a topic, a key, a cursor or group name)
// for one segment of a route's path: url.PathEscape, and "." and ".." as
// %2E and %2E%2E, which a path would otherwise take as itself or its
// parent. (The daemon also takes a key's slashes unescaped; a client
// escapes them.)
func EscapeSegment(s string) string {
	switch s {
	case ".":
		return "%2E"
	case "..":
		return "%2E%2E"
	}
	return url.PathEscape(s)
}
