package index

import "sync"

// preparer makes the next chunk of a set's arrays ahead of their writer,
// on one goroutine for the set: an array asks once its last chunk is half
// full (see array.prepareNext), so that crossing into the next chunk is a
// pointer swap, not a file creation, a map and a directory fsync on the
// writer's path (where a topic's entries 512, 1536, 3584, ... waited
// milliseconds for them).
type preparer struct {
	mu    sync.Mutex
	queue []*array // asked, not prepared yet

	kick chan struct{}
	done chan struct{}
	wg   sync.WaitGroup
}

// newPreparer starts a preparer; stop ends it.
func newPreparer() *preparer {
	p := &preparer{kick: make(chan struct{}, 1), done: make(chan struct{})}
	p.wg.Add(1)
	go p.loop()
	return p
}

// request asks for a's next chunk. It does not block. Safe from any
// goroutine.
func (p *preparer) request(a *array) {
	p.mu.Lock()
	p.queue = append(p.queue, a)
	p.mu.Unlock()
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

func (p *preparer) loop() {
	defer p.wg.Done()
	for {
		select {
		case <-p.done:
			return
		case <-p.kick:
		}
		p.mu.Lock()
		queue := p.queue
		p.queue = nil
		p.mu.Unlock()
		for _, a := range queue {
			select {
			case <-p.done:
				return
			default:
			}
			a.prepareNext()
		}
	}
}

// stop ends the preparer and waits for it; what was asked and not made
// yet the writers make themselves (a closed array makes nothing).
func (p *preparer) stop() {
	close(p.done)
	p.wg.Wait()
}
