package config

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// unitMultiplier maps a lower-case size suffix to its multiplier. Every
// suffix is binary (a power of 1024): "1G", "1GB" and "1GiB" all mean 1<<30
// bytes, the convention memory sizes are usually written in.
func unitMultiplier(unit string) (int64, bool) {
	switch unit {
	case "", "b":
		return 1, true
	case "k", "kb", "kib":
		return 1 << 10, true
	case "m", "mb", "mib":
		return 1 << 20, true
	case "g", "gb", "gib":
		return 1 << 30, true
	case "t", "tb", "tib":
		return 1 << 40, true
	}
	return 0, false
}

// ParseSize parses a byte size: a non-negative number (integer or decimal)
// followed by an optional unit, case-insensitive, with optional space
// between: "4096", "512MiB", "4GiB", "1G", "1.5 GiB", "256k". All units are
// binary (K = 1024). Fractional results are rounded to the nearest byte. It
// returns an error for an empty string, a negative or malformed number, an
// unknown unit, or a value above math.MaxInt64 bytes.
func ParseSize(s string) (int64, error) {
	t := strings.TrimSpace(s)
	if t == "" {
		return 0, fmt.Errorf("empty size")
	}
	i := 0
	for i < len(t) && (t[i] >= '0' && t[i] <= '9' || t[i] == '.') {
		i++
	}
	num, unit := t[:i], strings.ToLower(strings.TrimSpace(t[i:]))
	if num == "" {
		if strings.HasPrefix(t, "-") {
			return 0, fmt.Errorf("size %q is negative", s)
		}
		return 0, fmt.Errorf("size %q does not start with a number", s)
	}
	mult, ok := unitMultiplier(unit)
	if !ok {
		return 0, fmt.Errorf("size %q has unknown unit %q (use B, KiB, MiB, GiB, TiB or K, M, G, T)", s, t[i:])
	}
	if strings.Contains(num, ".") {
		f, err := strconv.ParseFloat(num, 64)
		if err != nil {
			return 0, fmt.Errorf("size %q: bad number %q", s, num)
		}
		v := math.Round(f * float64(mult))
		if v >= math.MaxInt64 {
			return 0, fmt.Errorf("size %q is too large", s)
		}
		return int64(v), nil
	}
	n, err := strconv.ParseUint(num, 10, 64)
	if err != nil || n > uint64(math.MaxInt64)/uint64(mult) {
		return 0, fmt.Errorf("size %q is too large", s)
	}
	return int64(n) * mult, nil
}

// FormatSize renders n bytes with the largest binary unit that divides it
// exactly ("256KiB", "10GiB", "1000"), so ParseSize(FormatSize(n)) == n.
func FormatSize(n int64) string {
	units := []struct {
		name string
		mult int64
	}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}}
	if n > 0 {
		for _, u := range units {
			if n%u.mult == 0 {
				return strconv.FormatInt(n/u.mult, 10) + u.name
			}
		}
	}
	return strconv.FormatInt(n, 10)
}

// HumanSize renders n bytes approximately with one decimal ("1.5 GiB",
// "300 B"), for tables shown to people.
func HumanSize(n int64) string {
	units := []string{"B", "KiB", "MiB", "GiB", "TiB", "PiB"}
	f := float64(n)
	i := 0
	for math.Abs(f) >= 1024 && i < len(units)-1 {
		f /= 1024
		i++
	}
	if i == 0 {
		return fmt.Sprintf("%d B", n)
	}
	return fmt.Sprintf("%.1f %s", f, units[i])
}
