package ui

import (
	"net/http"

	"github.com/frognano/frognano/runtime/node"
)

// NodeHandler mounts the dashboard on a node's HTTP server at Prefix,
// reading the node's own store and member list.
func NodeHandler() node.Handler {
	return node.Handler{Pattern: "GET " + Prefix, Handler: func(n *node.Node) http.Handler {
		s, err := New(Config{Stores: n.DB(), Members: func() []Member { return members(n) }})
		if err != nil {
			// The templates are embedded, so this is a build defect (the
			// package's tests catch it); the node still serves its API.
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				http.Error(w, err.Error(), http.StatusInternalServerError)
			})
		}
		return s
	}}
}

func members(n *node.Node) []Member {
	var out []Member
	for _, m := range n.Members() {
		out = append(out, Member{ID: m.ID, Address: m.Address(), HTTP: m.Info.GetHttpAddress(), Kinds: m.Kinds, Info: m.Info, Self: m.Address() == n.Address()})
	}
	return out
}
