package service

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestLimiter: n turns at once, q waiting; the next is refused at once with a 429 naming the
// limits; a waiter gives up after maxWait (429) or when its request ends (503).
func TestLimiter(t *testing.T) {
	l := newLimiter(1, 1, 100*time.Millisecond)
	ctx := context.Background()
	require.NoError(t, l.acquire(ctx)) // the one turn
	waited := make(chan error, 1)
	go func() { waited <- l.acquire(ctx) }() // the one waiter
	time.Sleep(20 * time.Millisecond)
	err := l.acquire(ctx) // over the queue: refused at once
	var ae *apiError
	require.True(t, errors.As(err, &ae))
	assert.Equal(t, 429, ae.status)
	assert.Contains(t, ae.msg, "max-compiles")
	assert.Contains(t, ae.msg, "compile-queue")
	err = <-waited // gives up after maxWait
	require.True(t, errors.As(err, &ae))
	assert.Equal(t, 429, ae.status)
	assert.Contains(t, ae.msg, "waited 100ms")
	cctx, cancel := context.WithCancel(ctx)
	go func() { time.Sleep(20 * time.Millisecond); cancel() }()
	err = l.acquire(cctx)
	require.True(t, errors.As(err, &ae))
	assert.Equal(t, 503, ae.status)
	l.release()
	require.NoError(t, l.acquire(ctx), "the turn is free again")
	l.release()
}
