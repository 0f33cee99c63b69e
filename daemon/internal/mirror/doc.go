// Package mirror is the one writer of a daemon's shared view file
// (--view-file, in the format of package localview): it keeps the file
// equal to the store's view, the changes of one publish as one batch of
// the file, writing them on the store's follower when it can and through
// a queue that Run applies otherwise; it beats the heartbeat, grows the
// file into new generations, puts the file back when it is deleted or
// replaced under it, and starts over with a new file after a write error
// (a full tmpfs), every Retry. Package daemon's doc ("The shared view")
// says what a reader sees.
package mirror
