package net

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/collplan/collplan/bootstrap"
)

func roster(nodes ...[]int) bootstrap.Roster {
	var r bootstrap.Roster
	for k, ranks := range nodes {
		name := string(rune('a' + k))
		r.Nodes = append(r.Nodes, bootstrap.NodeRanks{Node: name, Ranks: ranks})
		r.Size += len(ranks)
	}
	r.Records = make([]bootstrap.Record, r.Size)
	for _, n := range r.Nodes {
		for i, q := range n.Ranks {
			if q < r.Size {
				r.Records[q] = bootstrap.Record{Rank: q, Node: n.Node, Endpoint: bootstrap.Endpoint{Addrs: []string{n.Node + ":" + string(rune('0'+i))}}}
			}
		}
	}
	return r
}

func TestPlacementOf(t *testing.T) {
	p, err := PlacementOf(roster([]int{0, 1}, []int{2, 3}, []int{4}), 3)
	require.NoError(t, err)
	assert.Equal(t, Placement{Host: 1, RanksPerHost: 2, Peers: []string{"a:0", "b:0", "c:0"}}, p)

	for _, tc := range []struct {
		name string
		r    bootstrap.Roster
		want string
	}{
		{"uneven", roster([]int{0}, []int{1, 2}), "node b has 2 ranks, node a has 1"},
		{"not consecutive", roster([]int{0, 2}, []int{1, 3}), "node a holds rank 2 where rank 1 was due"},
		{"empty", bootstrap.Roster{}, "roster of 0 ranks"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := PlacementOf(tc.r, 0)
			assert.ErrorContains(t, err, tc.want)
		})
	}
	r := roster([]int{0, 1}, []int{2, 3})
	r.Records[2].Endpoint.Addrs = nil
	_, err = PlacementOf(r, 0)
	assert.ErrorContains(t, err, "rank 2 (node b) advertised no address")
}
