package kernelstest

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// ModelFile returns the path of a real model file for tests that need one
// (see FindModelFile), or skips the test.
func ModelFile(t testing.TB, env, storeName string) string {
	t.Helper()
	p, err := FindModelFile(env, storeName)
	if err != nil {
		t.Skip(err)
	}
	return p
}

// FindModelFile returns the file named by the environment variable env,
// else the file the model store holds under storeName (the store `frognano
// model pull` fills: $FROGNANO_MODELS, $XDG_DATA_HOME/frognano/models or
// ~/.local/share/frognano/models).
func FindModelFile(env, storeName string) (string, error) {
	if p := os.Getenv(env); p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("%s=%s: %w", env, p, err)
		}
		return p, nil
	}
	dir := os.Getenv("FROGNANO_MODELS")
	if dir == "" {
		if x := os.Getenv("XDG_DATA_HOME"); x != "" {
			dir = filepath.Join(x, "frognano", "models")
		} else if home, err := os.UserHomeDir(); err == nil {
			dir = filepath.Join(home, ".local", "share", "frognano", "models")
		}
	}
	var m struct {
		File string `json:"file"`
	}
	b, err := os.ReadFile(filepath.Join(dir, storeName, "manifest.json"))
	if err == nil {
		err = json.Unmarshal(b, &m)
	}
	p := filepath.Join(dir, storeName, m.File)
	if err == nil && m.File != "" {
		if _, err = os.Stat(p); err == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("no %s: set %s to its GGUF file, or run `frognano model pull %s`", storeName, env, storeName)
}
