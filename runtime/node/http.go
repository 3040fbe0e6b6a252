package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/protobuf/encoding/protojson"

	messages "github.com/frognano/frognano/actors/messages/v1"
	"github.com/frognano/frognano/runtime/membership"
	"github.com/frognano/frognano/runtime/placement"
	"github.com/frognano/frognano/runtime/supervise"
)

// InfoPath serves the node's facts as JSON; clients read the remoting address here.
const InfoPath = "/v1/node"

// check is one named readiness condition.
type check struct {
	name string
	fn   func(ctx context.Context) error
}

func (n *Node) checks() []check {
	return []check{
		{"store", func(ctx context.Context) error { return n.db.Ping(ctx) }},
		{"actors", func(ctx context.Context) error {
			res, err := n.system.Root.RequestFuture(n.manager, &messages.Ping{Seq: 1}, time.Second).Result()
			if err != nil {
				return err
			}
			if _, ok := res.(*messages.Pong); !ok {
				return fmt.Errorf("manager answered %T", res)
			}
			return nil
		}},
		{"cluster", func(context.Context) error {
			for _, m := range n.Members() {
				if m.Address() == n.system.Address() {
					return nil
				}
			}
			return errors.New("this node is not in its own member list")
		}},
	}
}

func (n *Node) serveHTTP() {
	n.metrics = prometheus.NewRegistry()
	n.metrics.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		supervise.Restarts,
		placement.Retries,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "frognano", Name: "cluster_members", Help: "Live cluster members seen by this node."},
			func() float64 { return float64(len(n.Members())) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "frognano", Name: "node_gpus", Help: "GPUs found on this node."},
			func() float64 { return float64(len(n.caps.Gpus)) }),
	)
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("/livez", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("/readyz", n.readyz)
	mux.Handle("/metrics", promhttp.HandlerFor(n.metrics, promhttp.HandlerOpts{}))
	mux.Handle(membership.Path, n.membership.Handler())
	mux.HandleFunc(InfoPath, func(w http.ResponseWriter, r *http.Request) {
		b, _ := protojson.Marshal(n.Info())
		w.Header().Set("Content-Type", "application/json")
		w.Write(b)
	})
	for _, h := range n.handlers {
		mux.Handle(h.Pattern, h.Handler(n))
	}
	n.http = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := n.http.Serve(n.httpLn); err != nil && !errors.Is(err, http.ErrServerClosed) {
			n.log.Error("http server stopped", "error", err)
		}
	}()
}

// readyz runs every named check; ?verbose lists them like etcd and Kubernetes do.
func (n *Node) readyz(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	type result struct {
		Name  string `json:"name"`
		OK    bool   `json:"ok"`
		Error string `json:"error,omitempty"`
	}
	var results []result
	ok := true
	for _, c := range n.checks() {
		err := c.fn(ctx)
		res := result{Name: c.name, OK: err == nil}
		if err != nil {
			ok = false
			res.Error = err.Error()
		}
		results = append(results, res)
	}
	status := http.StatusOK
	if !ok {
		status = http.StatusServiceUnavailable
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"ready": ok, "checks": results})
}
