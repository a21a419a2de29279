// SPDX-License-Identifier: Apache-2.0

package guestvm

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Control drives a guest node's control endpoint (hack/e2e/guest-main.sh):
// each Exec runs a shell script there, with hack/e2e/e2e-lib.sh sourced.
type Control struct {
	url    string
	client *http.Client
}

// NewControl returns a Control for the endpoint at url (e.g.
// "http://127.0.0.1:8000"); one script may run for up to 3 minutes.
func NewControl(url string) *Control {
	return &Control{url: strings.TrimRight(url, "/"), client: &http.Client{Timeout: 3 * time.Minute}}
}

// exitLine ends every answer; the newline before it is the endpoint's, not
// the script's.
var exitLine = regexp.MustCompile(`\nexit=(\d+)\n$`)

// Exec runs script in the guest and returns its combined output and exit
// code; the error is for the endpoint, not the script.
func (c *Control) Exec(ctx context.Context, script string) (string, int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.url+"/cgi-bin/exec", strings.NewReader(script))
	if err != nil {
		return "", 0, err
	}
	req.Header.Set("Content-Type", "text/plain")
	resp, err := c.client.Do(req)
	if err != nil {
		return "", 0, fmt.Errorf("guest control endpoint: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", 0, fmt.Errorf("reading guest answer: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return "", 0, fmt.Errorf("guest control endpoint: %s: %s", resp.Status, body)
	}
	loc := exitLine.FindSubmatchIndex(body)
	if loc == nil {
		return string(body), 0, fmt.Errorf("guest answer has no exit line: %q", body)
	}
	code, _ := strconv.Atoi(string(body[loc[2]:loc[3]]))
	return string(body[:loc[0]]), code, nil
}
