package client

import (
	"context"
	"net/http"

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
