package index

import (
	"math/rand/v2"
	"sync"
	"time"
)

// prepLater bounds how long after an ask the preparer makes the chunks
// asked for (see array.prepareNext): a random moment in [0, prepLater),
// so that the nodes of a fleet, whose indexes ask at the same records,
// make their chunks at different ones (BenchmarkBoundaryLatencyProcs in
// internal/fleet). A writer whose ready entries would not last twice
// that asks for its chunks at once instead (array.askNow).
const prepLater = 50 * time.Millisecond

// preparer makes the next chunks of a set's arrays ahead of their
// writer, on one goroutine for the set, so that crossing into the next
// chunk is a pointer swap, not a file creation and a map on the writer's
// path (where a topic's entries 512, 1536, 3584, ... waited milliseconds
// for them), and so that no node makes them at the records every node
// crosses at once (where they delayed those records on every node).
type preparer struct {
	delay time.Duration // the bound of the random moment (prepLater; tests' own)

	mu    sync.Mutex
	now   []*array        // make up to aheadChunks at once (array.askNow)
	reaps []*array        // with dropped chunks' files to see to
	later map[*array]bool // make up to aheadChunks at a random moment
	timer *time.Timer     // armed while later is not empty
	fire  chan struct{}   // the timer's

	kick chan struct{}
	done chan struct{}
	wg   sync.WaitGroup
}

// newPreparer starts a preparer that makes what is asked for later at a
// random moment within delay (prepLater but in tests); stop ends it.
func newPreparer(delay time.Duration) *preparer {
	p := &preparer{delay: delay, later: map[*array]bool{}, fire: make(chan struct{}, 1),
		kick: make(chan struct{}, 1), done: make(chan struct{})}
	p.wg.Add(1)
	go p.loop()
	return p
}

// request asks for a's next chunks, aheadChunks of them: within p.delay,
// or with now at once. It does not block. Safe from any goroutine.
func (p *preparer) request(a *array, now bool) {
	p.mu.Lock()
	if now {
		p.now = append(p.now, a)
	} else {
		p.later[a] = true
		if p.timer == nil {
			p.timer = time.AfterFunc(rand.N(p.delay), func() {
				select {
				case p.fire <- struct{}{}:
				default:
				}
			})
		}
	}
	p.mu.Unlock()
	if now {
		select {
		case p.kick <- struct{}{}:
		default:
		}
	}
}

// reap asks for the files of a's dropped chunks to be renamed free or
// deleted (array.reapDropped), at once. It does not block. Safe from any
// goroutine.
func (p *preparer) reap(a *array) {
	p.mu.Lock()
	p.reaps = append(p.reaps, a)
	p.mu.Unlock()
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

func (p *preparer) loop() {
	defer p.wg.Done()
	for {
		var queue, reaps []*array
		select {
		case <-p.done:
			return
		case <-p.kick:
			p.mu.Lock()
			queue, p.now = p.now, nil
			reaps, p.reaps = p.reaps, nil
			p.mu.Unlock()
		case <-p.fire:
			p.mu.Lock()
			for a := range p.later {
				queue = append(queue, a)
			}
			clear(p.later)
			p.timer = nil
			p.mu.Unlock()
		}
		for _, a := range queue {
			select {
			case <-p.done:
				return
			default:
			}
			a.prepareNext(aheadChunks)
			a.releaseBehind()
		}
		for _, a := range reaps {
			a.reapDropped()
		}
	}
}

// stop ends the preparer and waits for it; what was asked and not made
// yet the writers make themselves (a closed array makes nothing).
func (p *preparer) stop() {
	close(p.done)
	p.mu.Lock()
	if p.timer != nil {
		p.timer.Stop()
	}
	p.mu.Unlock()
	p.wg.Wait()
}
