// Package ui is the node's read-only web dashboard, served at /ui: the runs
// and their learning curves (live, over server-sent events), trajectories
// turn by turn, tasks with their diffs, environments, the cluster's members
// and the frontier's pool. Everything it shows is read from the node's
// stores on each request; it writes nothing. Its pages, styles, scripts and
// the vendored chart library (uPlot, MIT) are embedded in the binary.
package ui

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"time"

	"github.com/frognano/frognano/persistence"
	rtmsg "github.com/frognano/frognano/runtime/messages/v1"
)

// Prefix is where a node mounts the dashboard.
const Prefix = "/ui/"

// Stores are the records the dashboard reads; *persistence.DB provides them.
type Stores interface {
	Runs() persistence.RunStore
	Trajectories() persistence.TrajectoryStore
	Tasks() persistence.TaskStore
	Environments() persistence.EnvironmentStore
	Frontier() persistence.FrontierStore
	Coverage() persistence.CoverageStore
}

var _ Stores = (*persistence.DB)(nil)

// Member is one cluster member as the dashboard lists it.
type Member struct {
	ID      string
	Address string
	HTTP    string
	Kinds   []string
	Info    *rtmsg.NodeInfo // nil when the member did not publish its facts
	Self    bool
}

// Config is what the dashboard needs from its node.
type Config struct {
	Stores Stores
	// Members lists the cluster as this node sees it (nil: no cluster page
	// rows).
	Members func() []Member
	// Poll is how often a live run page's event stream looks for new curve
	// points (default 1 s).
	Poll time.Duration
	// Heartbeat is how often an idle event stream sends a comment, so that
	// proxies keep it open (default 15 s).
	Heartbeat time.Duration
	Logger    *slog.Logger
}

//go:embed assets templates
var files embed.FS

// Server serves the dashboard under Prefix.
type Server struct {
	cfg   Config
	pages map[string]*template.Template
	mux   *http.ServeMux
}

// New builds the dashboard's handler.
func New(cfg Config) (*Server, error) {
	if cfg.Stores == nil {
		return nil, errors.New("ui: no stores")
	}
	if cfg.Poll <= 0 {
		cfg.Poll = time.Second
	}
	if cfg.Heartbeat <= 0 {
		cfg.Heartbeat = 15 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Members == nil {
		cfg.Members = func() []Member { return nil }
	}
	s := &Server{cfg: cfg, pages: map[string]*template.Template{}, mux: http.NewServeMux()}
	names, err := fs.Glob(files, "templates/page_*.html")
	if err != nil {
		return nil, err
	}
	for _, name := range names {
		t, err := template.New("layout.html").Funcs(funcs).ParseFS(files, "templates/layout.html", name)
		if err != nil {
			return nil, fmt.Errorf("ui: template %s: %w", name, err)
		}
		s.pages[name[len("templates/page_"):len(name)-len(".html")]] = t
	}
	assets, err := fs.Sub(files, "assets")
	if err != nil {
		return nil, err
	}
	static := http.StripPrefix(Prefix+"static/", http.FileServerFS(assets))
	s.mux.Handle("GET "+Prefix+"static/", cacheFor(time.Hour, static))
	s.mux.HandleFunc("GET "+Prefix+"{$}", s.runsPage)
	s.mux.HandleFunc("GET "+Prefix+"run", s.runPage)
	s.mux.HandleFunc("GET "+Prefix+"run/data", s.runData)
	s.mux.HandleFunc("GET "+Prefix+"run/events", s.runEvents)
	s.mux.HandleFunc("GET "+Prefix+"run/export", s.runExport)
	s.mux.HandleFunc("GET "+Prefix+"trajectories", s.trajectoriesPage)
	s.mux.HandleFunc("GET "+Prefix+"trajectory", s.trajectoryPage)
	s.mux.HandleFunc("GET "+Prefix+"tasks", s.tasksPage)
	s.mux.HandleFunc("GET "+Prefix+"task", s.taskPage)
	s.mux.HandleFunc("GET "+Prefix+"cluster", s.clusterPage)
	s.mux.HandleFunc("GET "+Prefix+"frontier", s.frontierPage)
	return s, nil
}

func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.mux.ServeHTTP(w, r) }

func cacheFor(d time.Duration, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", fmt.Sprintf("public, max-age=%d", int(d.Seconds())))
		h.ServeHTTP(w, r)
	})
}

// page is what every template gets: the page's title, its nav section and
// its own data.
type page struct {
	Title   string
	Section string
	Data    any
}

func (s *Server) render(w http.ResponseWriter, r *http.Request, name, title, section string, data any) {
	t, ok := s.pages[name]
	if !ok {
		http.Error(w, "no page "+name, http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	if err := t.Execute(w, page{Title: title, Section: section, Data: data}); err != nil {
		s.cfg.Logger.Warn("ui: rendering failed", "page", name, "path", r.URL.Path, "err", err)
	}
}

// fail answers a store error: 404 for a missing record, 400 for a bad id,
// 500 otherwise.
func (s *Server) fail(w http.ResponseWriter, r *http.Request, err error) {
	code := http.StatusInternalServerError
	switch {
	case errors.Is(err, persistence.ErrNotFound):
		code = http.StatusNotFound
	case errors.Is(err, persistence.ErrInvalid):
		code = http.StatusBadRequest
	case errors.Is(err, context.Canceled):
		return
	}
	if code == http.StatusInternalServerError {
		s.cfg.Logger.Warn("ui: reading the store failed", "path", r.URL.Path, "err", err)
	}
	w.Header().Set("Cache-Control", "no-store")
	s.renderStatus(w, r, code, err.Error())
}

func (s *Server) renderStatus(w http.ResponseWriter, r *http.Request, code int, msg string) {
	t := s.pages["error"]
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(code)
	_ = t.Execute(w, page{Title: http.StatusText(code), Data: msg})
}
