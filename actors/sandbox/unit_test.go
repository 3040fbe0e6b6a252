package sandbox

import (
	"slices"
	"testing"

	"github.com/containerd/containerd/mount"
)

// Tests of the plain logic, which need no containerd.

func TestMatchGlob(t *testing.T) {
	tests := []struct {
		glob, path string
		want       bool
	}{
		{"", "a/b.py", true},
		{"*.py", "a/b/c.py", true},
		{"*.py", "a/b/c.go", false},
		{"a/*.py", "a/c.py", true},
		{"a/*.py", "a/b/c.py", false},
		{"a/**/*.py", "a/c.py", true},
		{"a/**/*.py", "a/b/d/c.py", true},
		{"**", "x/y/z", true},
		{"**/test_*.py", "tests/unit/test_x.py", true},
		{"tests/**", "src/x.py", false},
		{"/a/*.py", "a/c.py", true},
	}
	for _, tt := range tests {
		got, err := matchGlob(tt.glob, tt.path)
		if err != nil || got != tt.want {
			t.Errorf("matchGlob(%q, %q) = %v, %v; want %v", tt.glob, tt.path, got, err, tt.want)
		}
	}
	if _, err := matchGlob("a/[", "a/b"); err == nil {
		t.Error("a malformed glob must be an error")
	}
}

func TestGoSelection(t *testing.T) {
	tests := []struct {
		name  string
		ids   []string
		pkgs  []string
		run   string
		isErr bool
	}{
		{"none", nil, nil, "", false},
		{"one", []string{"m/p/TestA"}, []string{"m/p"}, "^(TestA)$", false},
		{"subtest runs its parent", []string{"m/p/TestA/case_1", "m/p/TestA/case_2"}, []string{"m/p"}, "^(TestA)$", false},
		{"two packages", []string{"m/p/TestA", "m/q/TestB"}, []string{"m/p", "m/q"}, "^(TestA|TestB)$", false},
		{"not an id", []string{"m/p"}, nil, "", true},
		{"an option in disguise", []string{"-exec/TestA"}, nil, "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pkgs, run, err := goSelection(tt.ids)
			if (err != nil) != tt.isErr || !slices.Equal(pkgs, tt.pkgs) || run != tt.run {
				t.Fatalf("goSelection(%v) = %v, %q, %v", tt.ids, pkgs, run, err)
			}
		})
	}
}

func TestOptionsDefaults(t *testing.T) {
	o, err := Options{}.withDefaults()
	if err != nil || o.RepoDir != "/repo" || o.MemoryBytes != DefaultOptions.MemoryBytes || o.Pids != DefaultOptions.Pids {
		t.Fatalf("%+v %v", o, err)
	}
	bad := []Options{
		{RepoDir: "repo"},
		{RepoDir: "/"},
		{RepoDir: "/repo/../etc"},
		{Writable: []string{"relative"}},
		{MemoryBytes: 1 << 10},
		{Pids: 2},
		{TmpBytes: 10},
		{Env: []string{"NOEQUALS"}},
	}
	for _, b := range bad {
		if _, err := b.withDefaults(); err == nil {
			t.Errorf("%+v accepted", b)
		}
	}
}

func TestLowerDirs(t *testing.T) {
	tests := []struct {
		name  string
		view  []mount.Mount
		lower string
		extra []string
		isErr bool
	}{
		{"one layer is a bind mount", []mount.Mount{{Type: "bind", Source: "/s/1/fs", Options: []string{"ro", "rbind"}}}, "/s/1/fs", nil, false},
		{"layers are an overlay", []mount.Mount{{Type: "overlay", Options: []string{"index=off", "lowerdir=/s/2/fs:/s/1/fs"}}}, "/s/2/fs:/s/1/fs", []string{"index=off"}, false},
		{"other snapshotters are refused", []mount.Mount{{Type: "btrfs"}}, "", nil, true},
		{"no mounts", nil, "", nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lower, extra, err := lowerDirs(tt.view)
			if (err != nil) != tt.isErr || lower != tt.lower || !slices.Equal(extra, tt.extra) {
				t.Fatalf("lowerDirs = %q %v %v", lower, extra, err)
			}
		})
	}
}

func TestCapBuffer(t *testing.T) {
	c := &capBuffer{limit: 5}
	for _, s := range []string{"ab", "cd", "ef", "gh"} {
		if n, err := c.Write([]byte(s)); n != len(s) || err != nil {
			t.Fatalf("write %q: %d %v", s, n, err)
		}
	}
	if string(c.Bytes()) != "abcde" || !c.Truncated() {
		t.Fatalf("%q %v", c.Bytes(), c.Truncated())
	}
}
