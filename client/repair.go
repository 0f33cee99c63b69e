package client

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"

	"github.com/cachecast/cachecast/wire"
)

// Repair is the "repair" object of the daemon's status: the records of its
// log found damaged, set aside and pulled back from the peers.
type Repair = wire.RepairStatus

// LostRecord is one record of the daemon's log set aside as damaged.
type LostRecord = wire.LostRecord

// AcceptLost gives up the records of the daemon's log lost to damage that
// no peer could give back (POST /v1/repair/accept, the admin role), and
// returns them.
func (c *Client) AcceptLost(ctx context.Context) ([]LostRecord, error) {
	var res wire.AcceptLostResult
	if err := c.call(ctx, request{method: http.MethodPost, url: apiURL([]string{"/v1/repair/accept"}, nil)}, &res); err != nil {
		return nil, err
	}
	return res.Accepted, nil
}

// ForgetMember makes the daemon forget a member removed from the fleet
// for good (POST /v1/cluster/forget/{name}, the admin role): it is no
// longer missing nor called back. With fleet, every alive member is
// asked to forget it too; the result says what each node did.
func (c *Client) ForgetMember(ctx context.Context, name string, fleet bool) (wire.ForgetResult, error) {
	var res wire.ForgetResult
	var q url.Values
	if fleet {
		q = url.Values{"fleet": {"true"}}
	}
	err := c.call(ctx, request{method: http.MethodPost, url: apiURL([]string{"/v1/cluster/forget/", name}, q)}, &res)
	return res, err
}

// Backup copies the daemon's backup file (GET /v1/backup, the admin role:
// package backup's layout) to w and returns its size. It is not bounded
// by the client's timeout: a large view takes a while. Check what w got
// with backup.Verify: a daemon that failed on the way cuts it short.
func (c *Client) Backup(ctx context.Context, w io.Writer) (int64, error) {
	resp, done, err := c.send(ctx, request{method: http.MethodGet, url: apiURL([]string{"/v1/backup"}, nil)}, false)
	if err != nil {
		return 0, err
	}
	defer done()
	n, err := io.Copy(w, resp.Body)
	if err != nil {
		return n, fmt.Errorf("client: GET /v1/backup: %w", err)
	}
	return n, nil
}
