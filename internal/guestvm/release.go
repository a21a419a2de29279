// SPDX-License-Identifier: Apache-2.0

package guestvm

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"
)

// DefaultRelease is the Debian release whose kernel the guest boots unless
// $GUEST_RELEASE names another (hack/guest/kernels/<release>).
const DefaultRelease = "bookworm"

// KernelsDir is where the kernel pins live, one file per Debian release,
// relative to the repository.
const KernelsDir = "hack/guest/kernels"

// Release is a Debian release the guest can boot: its pinned kernel, and the
// apt that fetches its packages. For the host's own release that is the
// host's apt, and the judges (systemd-modules-load, kmod) are the host's
// installed ones; for another release a private apt state under the cache
// reads that suite from the host's mirror, and the judges come from the
// release's own packages (EnsureUserland).
type Release struct {
	// Name is the suite's codename: bullseye, bookworm, trixie.
	Name string
	// Pin is the file pinning its kernel (KernelsDir/<Name>).
	Pin string
	// Host is set when Name is the host's release.
	Host bool
	// Apt fetches the release's packages.
	Apt *Apt
}

// Releases returns the releases pinned under repoRoot's KernelsDir, sorted.
func Releases(repoRoot string) ([]string, error) {
	ents, err := os.ReadDir(filepath.Join(repoRoot, KernelsDir))
	if err != nil {
		return nil, fmt.Errorf("reading the kernel pins: %w", err)
	}
	var names []string
	for _, e := range ents {
		if e.Type().IsRegular() && releaseNameRE.MatchString(e.Name()) {
			names = append(names, e.Name())
		}
	}
	slices.Sort(names)
	return names, nil
}

var releaseNameRE = regexp.MustCompile(`^[a-z][a-z0-9]*$`)

// LoadRelease returns release name ("" is DefaultRelease), pinned in
// repoRoot's KernelsDir, with the apt that reads it: the host's when name is
// the host's codename (/etc/os-release), else a private one under cacheDir.
func LoadRelease(repoRoot, cacheDir, name string) (*Release, error) {
	if name == "" {
		name = DefaultRelease
	}
	if !releaseNameRE.MatchString(name) {
		return nil, fmt.Errorf("release %q: not a Debian codename", name)
	}
	pin := filepath.Join(repoRoot, KernelsDir, name)
	if _, err := os.Stat(pin); err != nil {
		have, _ := Releases(repoRoot)
		return nil, fmt.Errorf("release %s: no kernel pinned (%s; pinned: %s): %w", name, pin, strings.Join(have, " "), err)
	}
	r := &Release{Name: name, Pin: pin, Host: name == HostCodename()}
	if r.Host {
		r.Apt = &Apt{Suite: name}
	} else {
		r.Apt = &Apt{Suite: name, Dir: filepath.Join(cacheDir, "guest", "apt", name)}
	}
	return r, nil
}

// HostCodename returns VERSION_CODENAME of /etc/os-release, or "".
func HostCodename() string {
	raw, err := os.ReadFile("/etc/os-release")
	if err != nil {
		return ""
	}
	for line := range strings.Lines(string(raw)) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "VERSION_CODENAME="); ok {
			return strings.Trim(v, `"'`)
		}
	}
	return ""
}

// Apt runs apt for one suite: the host's apt when Dir is "", else apt with
// a private state (lists, cache, sources) in Dir that reads only Suite,
// Suite-updates and Suite-security from the host's Debian mirror. The
// host's apt configuration is never changed.
type Apt struct {
	// Suite is the Debian codename.
	Suite string
	// Dir is the private state's directory ("" for the host's apt).
	Dir string
}

// aptListsMaxAge is how old a private suite's package lists may get before
// Update fetches them again (only when something must be resolved).
const aptListsMaxAge = 24 * time.Hour

// Command returns an apt command (apt-get, apt-cache) under this apt.
func (a *Apt) Command(ctx context.Context, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
	if a.Dir != "" {
		cmd.Env = append(cmd.Env, "APT_CONFIG="+filepath.Join(a.Dir, "apt.conf"))
	}
	return cmd
}

// Known reports whether apt's index has package pkg.
func (a *Apt) Known(ctx context.Context, pkg string) bool {
	out, err := a.Command(ctx, "apt-cache", "show", "--no-all-versions", pkg).Output()
	return err == nil && len(out) > 0
}

// Update fetches the package lists: the host's under the project's apt
// lock; a private suite's when it has none or they are older than a day,
// or always when force is set.
func (a *Apt) Update(ctx context.Context, force bool, logw io.Writer) error {
	if a.Dir == "" {
		return aptUpdate(ctx, logw)
	}
	stamp := filepath.Join(a.Dir, "updated")
	if fi, err := os.Stat(stamp); err == nil && !force && time.Since(fi.ModTime()) < aptListsMaxAge {
		return nil
	}
	if err := a.setup(); err != nil {
		return err
	}
	unlock, err := lockFile(filepath.Join(a.Dir, ".lock"))
	if err != nil {
		return err
	}
	defer unlock()
	logf(logw, "apt: reading Debian %s's package lists (private state in %s)", a.Suite, a.Dir)
	cmd := a.Command(ctx, "apt-get", "update", "-qq")
	cmd.Stdout, cmd.Stderr = logw, logw
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("apt-get update for %s: %w", a.Suite, err)
	}
	return os.WriteFile(stamp, nil, 0o644)
}

// setup writes the private state's apt.conf and sources.list.
func (a *Apt) setup() error {
	for _, d := range []string{"lists/partial", "cache/archives/partial", "empty", "preferences.d"} {
		if err := os.MkdirAll(filepath.Join(a.Dir, d), 0o755); err != nil {
			return err
		}
	}
	// apt drops to the _apt user to download; it must be able to write there.
	for _, d := range []string{"lists/partial", "cache/archives/partial"} {
		if err := os.Chmod(filepath.Join(a.Dir, d), 0o777); err != nil {
			return err
		}
	}
	if err := os.WriteFile(filepath.Join(a.Dir, "status"), nil, 0o644); err != nil {
		return err
	}
	main, security := HostMirrors()
	const keyring = "/usr/share/keyrings/debian-archive-keyring.gpg"
	sources := fmt.Sprintf("deb [signed-by=%[1]s] %[2]s %[4]s main\n"+
		"deb [signed-by=%[1]s] %[2]s %[4]s-updates main\n"+
		"deb [signed-by=%[1]s] %[3]s %[4]s-security main\n", keyring, main, security, a.Suite)
	if err := os.WriteFile(filepath.Join(a.Dir, "sources.list"), []byte(sources), 0o644); err != nil {
		return err
	}
	d := a.Dir
	conf := fmt.Sprintf(`// Private apt state for Debian %[2]s (internal/guestvm); the host's apt is untouched.
Dir::State "%[1]s";
Dir::State::Lists "%[1]s/lists";
Dir::State::status "%[1]s/status";
Dir::Cache "%[1]s/cache";
Dir::Cache::srcpkgcache "";
Dir::Etc::SourceList "%[1]s/sources.list";
Dir::Etc::SourceParts "%[1]s/empty";
Dir::Etc::Parts "%[1]s/empty";
Dir::Etc::Preferences "%[1]s/preferences";
Dir::Etc::PreferencesParts "%[1]s/preferences.d";
APT::Architecture "amd64";
APT::Architectures { "amd64"; };
Acquire::Languages "none";
APT::Get::List-Cleanup "true";
`, d, a.Suite)
	return os.WriteFile(filepath.Join(a.Dir, "apt.conf"), []byte(conf), 0o644)
}

// HostMirrors returns the Debian mirror and the security mirror the host's
// apt sources name (deb822 .sources and one-line .list files), with
// deb.debian.org's as defaults.
func HostMirrors() (main, security string) {
	main, security = "http://deb.debian.org/debian", "http://deb.debian.org/debian-security"
	files, _ := filepath.Glob("/etc/apt/sources.list.d/*.sources")
	lists, _ := filepath.Glob("/etc/apt/sources.list.d/*.list")
	files = append(append(files, "/etc/apt/sources.list"), lists...)
	var uris []string
	for _, f := range files {
		uris = append(uris, sourceURIs(f)...)
	}
	foundMain, foundSec := false, false
	for _, u := range uris {
		switch {
		case strings.HasSuffix(strings.TrimRight(u, "/"), "/debian-security") && !foundSec:
			security, foundSec = strings.TrimRight(u, "/"), true
		case strings.HasSuffix(strings.TrimRight(u, "/"), "/debian") && !foundMain:
			main, foundMain = strings.TrimRight(u, "/"), true
		}
	}
	return main, security
}

// sourceURIs returns the URIs an apt source file names.
func sourceURIs(file string) []string {
	f, err := os.Open(file)
	if err != nil {
		return nil
	}
	defer f.Close()
	var uris []string
	s := bufio.NewScanner(f)
	for s.Scan() {
		line, _, _ := strings.Cut(s.Text(), "#")
		fields := strings.Fields(line)
		switch {
		case len(fields) >= 2 && fields[0] == "URIs:":
			uris = append(uris, fields[1:]...)
		case len(fields) >= 3 && fields[0] == "deb":
			for _, x := range fields[1:] {
				if strings.Contains(x, "://") {
					uris = append(uris, x)
					break
				}
			}
		}
	}
	return uris
}
