package image

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
)

// ErrNoMirror means no Debian archive to bootstrap the base image from was
// configured and none could be found in the host's apt sources.
var ErrNoMirror = errors.New("no Debian mirror for the base image")

// HostAptDir is where the host's apt configuration lives.
const HostAptDir = "/etc/apt"

// aptSource is one entry of an apt sources list: a binary ("deb") archive
// at URI offering Suites.
type aptSource struct {
	uri    string
	suites []string
}

// HostMirror finds the Debian archive the host's apt uses for suite, reading
// the sources lists in apt's order: aptDir/sources.list, then
// aptDir/sources.list.d/*.list (one-line format) and *.sources (deb822), by
// name. An entry offering suite itself wins; failing that, the entry for the
// main archive of another release (a suite without a -security, -updates or
// similar suffix, at a path ending in /debian, as every Debian mirror is laid
// out): such an archive serves every current suite. Security and update
// archives never qualify; debootstrap needs the main archive.
func HostMirror(aptDir, suite string) (string, error) {
	sources, read, err := readAptSources(aptDir)
	if err != nil {
		return "", err
	}
	for _, s := range sources {
		if slices.Contains(s.suites, suite) {
			return s.uri, nil
		}
	}
	for _, s := range sources {
		u, _ := url.Parse(s.uri)
		if path.Base(u.Path) != "debian" {
			continue
		}
		for _, su := range s.suites {
			if !strings.ContainsAny(su, "-/") {
				return s.uri, nil
			}
		}
	}
	where := "no apt sources list in " + aptDir
	if len(read) > 0 {
		where = "no entry for the Debian archive of " + suite + " in " + strings.Join(read, ", ")
	}
	return "", fmt.Errorf("%w (%s): set image.debian_mirror in the configuration file, FROGNANO_IMAGE_DEBIAN_MIRROR or --debian-mirror to a Debian archive URL (http://HOST/debian)", ErrNoMirror, where)
}

// readAptSources returns the usable entries of aptDir's sources lists in
// apt's order, and the files it read.
func readAptSources(aptDir string) ([]aptSource, []string, error) {
	files := []string{filepath.Join(aptDir, "sources.list")}
	entries, err := os.ReadDir(filepath.Join(aptDir, "sources.list.d"))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, nil, err
	}
	for _, e := range entries { // ReadDir sorts by name, as apt does
		if n := e.Name(); !e.IsDir() && (strings.HasSuffix(n, ".list") || strings.HasSuffix(n, ".sources")) {
			files = append(files, filepath.Join(aptDir, "sources.list.d", n))
		}
	}
	var out []aptSource
	var read []string
	for _, f := range files {
		data, err := os.ReadFile(f)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, nil, err
		}
		read = append(read, f)
		var got []aptSource
		if strings.HasSuffix(f, ".sources") {
			got = parseDeb822(string(data))
		} else {
			got = parseOneLine(string(data))
		}
		for _, s := range got {
			if uri, ok := usableURI(s.uri); ok {
				s.uri = uri
				out = append(out, s)
			}
		}
	}
	return out, read, nil
}

// parseOneLine reads the one-line format:
// deb [ option=value ... ] uri suite [component ...]
func parseOneLine(text string) []aptSource {
	var out []aptSource
	for _, line := range strings.Split(text, "\n") {
		line, _, _ = strings.Cut(line, "#")
		if i := strings.Index(line, "["); i >= 0 {
			if j := strings.Index(line[i:], "]"); j >= 0 {
				line = line[:i] + " " + line[i+j+1:]
			}
		}
		f := strings.Fields(line)
		if len(f) < 3 || f[0] != "deb" {
			continue
		}
		out = append(out, aptSource{uri: f[1], suites: f[2:3]})
	}
	return out
}

// parseDeb822 reads the deb822 format: stanzas of "Field: value" lines
// separated by blank lines, continuation lines indented, '#' lines comments.
func parseDeb822(text string) []aptSource {
	var out []aptSource
	fields := map[string]string{}
	last := ""
	flush := func() {
		if len(fields) > 0 && slices.Contains(strings.Fields(fields["types"]), "deb") && !strings.EqualFold(fields["enabled"], "no") {
			for _, uri := range strings.Fields(fields["uris"]) {
				out = append(out, aptSource{uri: uri, suites: strings.Fields(fields["suites"])})
			}
		}
		fields, last = map[string]string{}, ""
	}
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20) // Signed-By may inline a key
	for sc.Scan() {
		line := strings.TrimRight(sc.Text(), " \t\r")
		switch {
		case strings.HasPrefix(line, "#"):
		case line == "":
			flush()
		case line[0] == ' ' || line[0] == '\t':
			if last != "" {
				fields[last] += " " + strings.TrimSpace(line)
			}
		default:
			k, v, ok := strings.Cut(line, ":")
			if !ok {
				continue
			}
			last = strings.ToLower(strings.TrimSpace(k))
			fields[last] = strings.TrimSpace(v)
		}
	}
	flush()
	return out
}

// usableURI keeps the schemes debootstrap fetches from (apt's mirror+,
// tor+ and cdrom: methods are not among them) and drops a trailing slash.
func usableURI(s string) (string, bool) {
	u, err := url.Parse(s)
	if err != nil {
		return "", false
	}
	switch u.Scheme {
	case "http", "https":
		if u.Host == "" {
			return "", false
		}
	case "file":
		if u.Path == "" {
			return "", false
		}
	default:
		return "", false
	}
	return strings.TrimRight(s, "/"), true
}
