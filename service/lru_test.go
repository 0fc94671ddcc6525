package service

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestLRU: the bound holds and the least recently used entry goes first (a get counts as a use).
func TestLRU(t *testing.T) {
	c := newLRU[string, int](2)
	c.add("a", 1)
	c.add("b", 2)
	_, ok := c.get("a") // a is now the most recent
	require.True(t, ok)
	c.add("c", 3) // evicts b
	_, ok = c.get("b")
	assert.False(t, ok, "b was the least recently used")
	v, ok := c.get("a")
	assert.True(t, ok)
	assert.Equal(t, 1, v)
	c.add("a", 10) // replaces, no eviction
	assert.Equal(t, 2, c.len())
	v, _ = c.get("a")
	assert.Equal(t, 10, v)
	c.remove("a")
	assert.Equal(t, 1, c.len())
}

// TestClassCache: a second query of a class is a cache hit; a new size of the same class too; a
// new class is a miss; the cache holds at most CacheClasses classes.
func TestClassCache(t *testing.T) {
	cfg := testConfig()
	cfg.CacheClasses = 2
	s := newTestServer(t, cfg)
	h := s.Handler()
	for _, q := range []string{
		`{"node":"h100","bytes":8}`,                    // miss
		`{"node":"h100","bytes":"1G"}`,                 // hit: same class, another size
		`{"node":"h100","bytes":8,"coll":"allgather"}`, // miss
		`{"node":"h100","bytes":8,"coll":"broadcast"}`, // miss, evicts allreduce
		`{"node":"h100","bytes":8}`,                    // miss again
		`{"node":"h100","bytes":8,"coll":"broadcast"}`, // hit
	} {
		call(t, h, "POST", "/v1/plan", q, nil)
	}
	m := call(t, h, "GET", "/metrics", "", nil).Body.String()
	assert.Contains(t, m, "collplan_class_cache_hits_total 2")
	assert.Contains(t, m, "collplan_class_cache_misses_total 4")
	assert.Equal(t, 2, s.cur.classes.len())
}
