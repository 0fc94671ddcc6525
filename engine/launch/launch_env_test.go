//go:build unix

package launch

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestRankEnvGOMAXPROCS: more ranks than cores get GOMAXPROCS=1 unless the environment sets
// GOMAXPROCS; ranks that fit the cores keep the environment as it is; the caller's slice is not
// changed.
func TestRankEnvGOMAXPROCS(t *testing.T) {
	env := []string{"A=1", "B=2"}
	assert.Equal(t, env, rankEnv(env, 2, 2))
	assert.Equal(t, env, rankEnv(env, 1, 4))
	got := rankEnv(env[:2:2], 4, 2)
	assert.Equal(t, []string{"A=1", "B=2", "GOMAXPROCS=1"}, got)
	assert.Equal(t, []string{"A=1", "B=2"}, env)
	user := []string{"A=1", "GOMAXPROCS=3"}
	assert.Equal(t, user, rankEnv(user, 8, 2))
	empty := []string{"GOMAXPROCS="} // set, even if empty: the user's choice
	assert.Equal(t, empty, rankEnv(empty, 8, 2))
}
