package store

import "github.com/cachecast/cachecast/store/internal/fsys"

// WriteFileAtomic makes the file at path hold b, whole or not at all, as
// the store writes its own metadata: a temporary file beside it, fsynced,
// renamed over path, and the directory fsynced. For the small files a
// caller keeps in the data directory beside the store (the daemon's
// remembered peers).
func WriteFileAtomic(path string, b []byte) error {
	return fsys.CreateAtomic(path, fsys.WriteSynced(b))
}
