package config

import (
	"errors"
	"fmt"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/cachecast/cachecast/wire"
)

// ParseSize reads a byte size: a plain number of bytes, or a number with a
// unit. KiB, MiB, GiB, TiB and the short K, M, G, T are powers of 1024;
// KB, MB, GB, TB are powers of 1000; B is bytes. Units are case-insensitive
// and may follow a space. Fractions are allowed where the result is whole
// (1.5MiB).
func ParseSize(s string) (int64, error) {
	t := strings.TrimSpace(s)
	i := len(t)
	for i > 0 && (t[i-1] < '0' || t[i-1] > '9') && t[i-1] != '.' {
		i--
	}
	num, unit := strings.TrimSpace(t[:i]), strings.ToLower(strings.TrimSpace(t[i:]))
	var mult float64
	switch unit {
	case "", "b":
		mult = 1
	case "k", "kib":
		mult = 1 << 10
	case "m", "mib":
		mult = 1 << 20
	case "g", "gib":
		mult = 1 << 30
	case "t", "tib":
		mult = 1 << 40
	case "kb":
		mult = 1e3
	case "mb":
		mult = 1e6
	case "gb":
		mult = 1e9
	case "tb":
		mult = 1e12
	default:
		return 0, fmt.Errorf("size %q: unknown unit %q (use B, KiB, MiB, GiB, TiB, KB, MB, GB or TB)", s, t[i:])
	}
	if num == "" {
		return 0, fmt.Errorf("size %q: no number", s)
	}
	if num[0] == '-' {
		return 0, fmt.Errorf("size %q: must not be negative", s)
	}
	if !strings.Contains(num, ".") {
		n, err := strconv.ParseInt(num, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("size %q: %w", s, errors.Unwrap(err))
		}
		if n != 0 && (n > math.MaxInt64/int64(mult)) {
			return 0, fmt.Errorf("size %q: too large", s)
		}
		return n * int64(mult), nil
	}
	f, err := strconv.ParseFloat(num, 64)
	if err != nil {
		return 0, fmt.Errorf("size %q: %w", s, errors.Unwrap(err))
	}
	v := f * mult
	if v >= math.MaxInt64 {
		return 0, fmt.Errorf("size %q: too large", s)
	}
	if v != math.Trunc(v) {
		return 0, fmt.Errorf("size %q: not a whole number of bytes", s)
	}
	return int64(v), nil
}

// sizeValue is a pflag.Value of a byte size.
type sizeValue struct{ p *int64 }

func newSizeValue(p *int64) *sizeValue { return &sizeValue{p} }

func (v *sizeValue) String() string {
	if v.p == nil {
		return "0"
	}
	return wire.FormatSize(*v.p)
}

func (v *sizeValue) Set(s string) error {
	n, err := ParseSize(s)
	if err != nil {
		return err
	}
	if n < 0 {
		return fmt.Errorf("size %q is negative", s)
	}
	*v.p = n
	return nil
}

func (v *sizeValue) Type() string { return "size" }

// modeValue is a pflag.Value of file permission bits in octal.
type modeValue struct{ p *os.FileMode }

func newModeValue(p *os.FileMode) *modeValue { return &modeValue{p} }

func (v *modeValue) String() string {
	if v.p == nil {
		return "0"
	}
	return fmt.Sprintf("%04o", uint32(*v.p))
}

func (v *modeValue) Set(s string) error {
	n, err := strconv.ParseUint(strings.TrimPrefix(strings.TrimPrefix(s, "0o"), "0O"), 8, 32)
	if err != nil {
		return fmt.Errorf("mode %q: want octal permission bits like 0660", s)
	}
	if n > 0o777 {
		return fmt.Errorf("mode %q: want permission bits 0000..0777", s)
	}
	*v.p = os.FileMode(n)
	return nil
}

func (v *modeValue) Type() string { return "mode" }

// idListValue is a pflag.Value of user or group IDs: comma separated, and
// repeated flags add to the list (the first one replaces the default).
type idListValue struct {
	p   *[]uint32
	set bool
}

func newIDListValue(p *[]uint32) *idListValue { return &idListValue{p: p} }

func (v *idListValue) String() string {
	if v.p == nil {
		return ""
	}
	parts := make([]string, len(*v.p))
	for i, id := range *v.p {
		parts[i] = strconv.FormatUint(uint64(id), 10)
	}
	return strings.Join(parts, ",")
}

func (v *idListValue) Set(s string) error {
	var ids []uint32
	for part := range strings.SplitSeq(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		n, err := strconv.ParseUint(part, 10, 32)
		if err != nil {
			return fmt.Errorf("id %q: want a number from 0 to %d", part, uint32(math.MaxUint32))
		}
		ids = append(ids, uint32(n))
	}
	if !v.set {
		*v.p = nil
		v.set = true
	}
	for _, id := range ids {
		if !slices.Contains(*v.p, id) {
			*v.p = append(*v.p, id)
		}
	}
	return nil
}

func (v *idListValue) Type() string { return "ids" }
