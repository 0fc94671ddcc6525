package net

import (
	"fmt"

	"github.com/collplan/collplan/bootstrap"
	"github.com/collplan/collplan/engine/internal/wire"
)

// Placement is where a job's hosts are, as Setup needs it: this rank's host index, the ranks per
// host, and each host's listener address.
type Placement struct {
	Host, RanksPerHost int
	Peers              []string
}

// PlacementOf reads a bootstrap.Join roster for rank: the roster's nodes are the hosts (in the
// order of their lowest rank), each must hold consecutive ranks, all the same count but the last,
// which may hold fewer (the engine's virtual nodes); a host's address is the first address its
// lowest rank advertised (Endpoint.Addrs[0]: the host's net listener).
func PlacementOf(r bootstrap.Roster, rank int) (Placement, error) {
	if len(r.Nodes) == 0 || r.Size != len(r.Records) || rank < 0 || rank >= r.Size {
		return Placement{}, fmt.Errorf("%w: net: roster of %d ranks, %d records, %d nodes: rank %d", wire.ErrInvalid, r.Size, len(r.Records), len(r.Nodes), rank)
	}
	p := Placement{Host: -1, RanksPerHost: len(r.Nodes[0].Ranks), Peers: make([]string, len(r.Nodes))}
	next := 0
	for k, n := range r.Nodes {
		last := k == len(r.Nodes)-1
		if len(n.Ranks) == 0 || len(n.Ranks) > p.RanksPerHost || (!last && len(n.Ranks) != p.RanksPerHost) {
			return Placement{}, fmt.Errorf("%w: net: node %s has %d ranks, node %s has %d: every host but the last needs the same count",
				wire.ErrInvalid, n.Node, len(n.Ranks), r.Nodes[0].Node, p.RanksPerHost)
		}
		for _, q := range n.Ranks {
			if q != next {
				return Placement{}, fmt.Errorf("%w: net: node %s holds rank %d where rank %d was due: a host's ranks must be consecutive",
					wire.ErrInvalid, n.Node, q, next)
			}
			if q == rank {
				p.Host = k
			}
			next++
		}
		addrs := r.Records[n.Ranks[0]].Endpoint.Addrs
		if len(addrs) == 0 || addrs[0] == "" {
			return Placement{}, fmt.Errorf("%w: net: rank %d (node %s) advertised no address", wire.ErrInvalid, n.Ranks[0], n.Node)
		}
		p.Peers[k] = addrs[0]
	}
	if next != r.Size {
		return Placement{}, fmt.Errorf("%w: net: the roster's nodes hold %d ranks of %d", wire.ErrInvalid, next, r.Size)
	}
	return p, nil
}
