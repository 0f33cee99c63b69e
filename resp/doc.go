// Package resp is cachecast's Redis front door: it speaks RESP2 and RESP3
// so that applications read the local view with the Redis client they
// already have.
package resp
