package service

import (
	"context"
	"fmt"
	"net/http"
	"time"
)

// limiter bounds concurrent work: n at once, and q more waiting, each at most maxWait; beyond
// that it refuses at once.
type limiter struct {
	run, wait chan struct{}
	n, q      int
	maxWait   time.Duration
}

func newLimiter(n, q int, maxWait time.Duration) *limiter {
	return &limiter{run: make(chan struct{}, n), wait: make(chan struct{}, n+q), n: n, q: q, maxWait: maxWait}
}

// acquire takes a turn, waiting in the queue until ctx ends; release gives it back. A full queue
// is a 429 naming the limits.
func (l *limiter) acquire(ctx context.Context) error {
	select {
	case l.wait <- struct{}{}:
	default:
		return &apiError{status: http.StatusTooManyRequests,
			msg: fmt.Sprintf("too many classes being priced: %d at once (max-compiles) and %d waiting (compile-queue); retry later", l.n, l.q)}
	}
	t := time.NewTimer(l.maxWait)
	defer t.Stop()
	select {
	case l.run <- struct{}{}:
		return nil
	case <-ctx.Done():
		<-l.wait
		return &apiError{status: http.StatusServiceUnavailable, msg: "the request ended while waiting for a compile turn"}
	case <-t.C:
		<-l.wait
		return &apiError{status: http.StatusTooManyRequests,
			msg: fmt.Sprintf("waited %s for a compile turn (max-compiles %d busy, compile-queue); retry later", l.maxWait, l.n)}
	}
}

func (l *limiter) release() {
	<-l.run
	<-l.wait
}
