package segment

import (
	"os"
	"path/filepath"
	"strings"

	"go.uber.org/zap"

	"github.com/cachecast/cachecast/store/internal/fsys"
)

// The segment files are a ring: a file whose segments are all recycled is
// kept open (up to MaxFreeSegments of them) and becomes a later file by
// one rename, its blocks written already and its pages possibly still in
// the page cache. The writer's path makes, unmaps and deletes no file:
//
//   - Recycle, on the writer's path, takes the segments out of the table
//     and queues them and the files whose last segments they were
//     (retireLocked); the preparer renames those files "<position>.free",
//     oldest first, unmaps the segments and keeps the files for reuse or
//     deletes them (retireQueued).
//   - the preparer keeps the file after the one the next segment goes in
//     made ahead (prepareFileAhead), so that a writer that finds no
//     segment made ahead at a file's first slot (the preparer behind)
//     makes a slot in an open file, not a file.
//
// A crash between the two finds a recycled file under its name. Open
// takes it for free when the metafile's oldest position is past it (the
// metafile is synced by the next flush); when the metafile still counts it
// retained, the log starts at it again, as if it had not been recycled
// (its records read again, before the snapshot's position; the index
// entries that point into it may be gone, as with the recycled first
// slots of a file still written, which a file keeps until its last slot
// goes, and readers skip what the indexes lack). Never is a later file
// renamed (nor reused) while an earlier one keeps its name, so a crash
// leaves the retained files contiguous, never a gap that would set the
// log after it aside. A file made ahead and never written (dropped when a
// rollback moved the writer back, whose position it may come to again) is
// renamed at once; a crash leaves such a file after the end of the log,
// where recovery deletes it, as it does a segment made ahead.

// retireLocked takes s, a segment the log no longer holds (recycled, or
// made ahead for a position the writer no longer goes to), out of the
// log: its map is the preparer's to drop (retireQueued); its file, when
// s was the last segment of it open, is renamed "<position>.free" (here
// when now, else by the preparer: see above) and kept for reuse once its
// maps are dropped. Under mu.
func (l *Log) retireLocked(s *segment, now bool) error {
	l.noteUnmapped(s)
	l.retiring = append(l.retiring, s)
	f := s.file
	if f.refs--; f.refs > 0 {
		return nil
	}
	if fb := s.base - s.off; l.files[fb] == f {
		delete(l.files, fb)
	}
	if now {
		if err := f.renameFree(); err != nil {
			f.closeFD() // left under its name: the next Open sees to it
			return err
		}
	}
	l.retiringFiles = append(l.retiringFiles, f)
	return nil
}

// renameFree renames f, a file none of whose segments the log holds,
// "<position>.free".
func (f *segFile) renameFree() error {
	free := f.path + freeSuffix
	if err := os.Rename(f.path, free); err != nil {
		return fsys.FileError("rename", f.path, err)
	}
	f.path = free
	return nil
}

// retireQueued does what retireLocked left to the preparer: it renames
// the files free, oldest first, unmaps the segments, then keeps the files
// for reuse (keepFree). The preparer's, and Close's once the preparer has
// stopped.
func (l *Log) retireQueued() {
	l.mu.Lock()
	files := l.retiringFiles
	l.retiringFiles = nil
	l.mu.Unlock()
	renamed := len(files)
	for i, f := range files {
		if strings.HasSuffix(f.path, freeSuffix) {
			continue
		}
		if err := f.renameFree(); err != nil {
			// Tried again next round, with every file after it: a later
			// file renamed before an earlier one would leave a gap.
			l.log.Warn("renaming a recycled segment file free failed", zap.Error(err))
			renamed = i
			break
		}
	}
	l.mu.Lock()
	l.retiringFiles = append(files[renamed:len(files):len(files)], l.retiringFiles...)
	for i, s := range l.retiring {
		if err := s.unmap(); err != nil {
			l.log.Warn("unmapping a recycled segment failed", zap.String("segment-path", s.path), zap.Error(err))
		}
		l.retiring[i] = nil
	}
	l.retiring = l.retiring[:0]
	l.mu.Unlock()
	for _, f := range files[:renamed] {
		l.keepFree(f)
	}
}

// keepFree keeps f, a file none of whose segments the log holds, for
// reuse, as it is (open, unless Open found it free), or deletes it when
// MaxFreeSegments wait already, so that retention gives the space back.
func (l *Log) keepFree(f *segFile) {
	l.mu.Lock()
	keep := len(l.free) < MaxFreeSegments
	if keep {
		l.free = append(l.free, f)
	}
	l.mu.Unlock()
	if keep {
		return
	}
	if err := f.closeFD(); err != nil {
		l.log.Warn("closing a recycled segment file failed", zap.Error(err))
	}
	if err := os.Remove(f.path); err != nil {
		l.log.Warn("deleting a recycled segment file failed", zap.Error(fsys.FileError("remove", f.path, err)))
	}
}

// takeFree takes a free file for reuse, nil if there is none. Under mu.
func (l *Log) takeFree() *segFile {
	if len(l.free) == 0 {
		return nil
	}
	f := l.free[len(l.free)-1]
	l.free = l.free[:len(l.free)-1]
	return f
}

// fileFor returns the open file that holds position base, with a
// reference for the caller's segment: the one made ahead, or one made
// here (a free one reused, or a new one) when there is none.
func (l *Log) fileFor(base int64) (*segFile, error) {
	fb := l.fileBase(base)
	l.mu.Lock()
	defer l.mu.Unlock()
	for l.makingFile == fb {
		l.prepCond.Wait()
	}
	f := l.files[fb]
	if f == nil {
		var err error
		if f, err = l.makeFileLocked(fb); err != nil {
			return nil, err
		}
	}
	f.refs++
	return f, nil
}

// makeFileLocked makes the file that starts at position fb (a free one
// reused, or a new one) and adds it to the open files, with no segment
// yet. Under mu, which it releases while it makes the file.
func (l *Log) makeFileLocked(fb int64) (*segFile, error) {
	l.makingFile = fb
	free := l.takeFree()
	l.mu.Unlock()
	f, err := createFile(filepath.Join(l.dir, segmentName(fb)), l.fileSize, l.window, free)
	l.dirDirty.Store(true)
	l.mu.Lock()
	l.makingFile = -1
	l.prepCond.Broadcast()
	if err != nil {
		return nil, err
	}
	l.files[fb] = f
	return f, nil
}

// prepareFileAhead makes the file after the one the next segment goes in
// (see the top of this file), for files of several segments: with one
// segment a file, the segment made ahead is the next file already.
func (l *Log) prepareFileAhead() {
	if l.slots == 1 {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	want := (l.lastIndex() + 1 + int64(len(l.ready))) * l.segSize
	ahead := l.fileBase(want + l.fileSize - l.segSize) // want's file when want is its first slot
	if l.files[ahead] != nil || l.makingFile >= 0 || l.stopping() {
		return
	}
	if _, err := l.makeFileLocked(ahead); err != nil {
		l.log.Warn("making the next segment file ahead failed", zap.Int64("base", ahead), zap.Error(err))
	}
}

// stopping reports whether Close has begun.
func (l *Log) stopping() bool {
	select {
	case <-l.done:
		return true
	default:
		return false
	}
}
