package gpu

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// ErrBusID is returned for a PCI bus id that NormalizeBusID cannot parse.
var ErrBusID = errors.New("malformed PCI bus id")

// NormalizeBusID returns a PCI bus id in the form Linux uses under
// /sys/bus/pci/devices: "dddd:bb:dd.f", lower-case hex, the domain with at
// least 4 digits. It accepts NVML's form with an 8-digit domain
// ("00000000:07:00.0", nvmlPciInfo_t.busId), the sysfs form, either case,
// and the legacy form without a domain ("07:00.0", domain 0). Limits are
// the PCI ones: domain ≤ 0xffffffff, bus ≤ 0xff, device ≤ 0x1f,
// function ≤ 7. A malformed id gives an error wrapping ErrBusID.
func NormalizeBusID(s string) (string, error) {
	bad := func(why string) (string, error) {
		return "", fmt.Errorf("%w %q: %s", ErrBusID, s, why)
	}
	rest, fn, ok := strings.Cut(s, ".")
	if !ok {
		return bad("no function")
	}
	parts := strings.Split(rest, ":")
	if len(parts) == 2 {
		parts = append([]string{"0"}, parts...)
	}
	if len(parts) != 3 {
		return bad("want domain:bus:device.function")
	}
	domain, err := hexField(parts[0], 8, 0xffffffff)
	if err != nil {
		return bad("domain " + err.Error())
	}
	bus, err := hexField(parts[1], 2, 0xff)
	if err != nil {
		return bad("bus " + err.Error())
	}
	dev, err := hexField(parts[2], 2, 0x1f)
	if err != nil {
		return bad("device " + err.Error())
	}
	f, err := hexField(fn, 1, 7)
	if err != nil {
		return bad("function " + err.Error())
	}
	return fmt.Sprintf("%04x:%02x:%02x.%x", domain, bus, dev, f), nil
}

// hexField parses 1 to maxDigits hex digits no greater than max.
func hexField(s string, maxDigits int, max uint64) (uint64, error) {
	if s == "" || len(s) > maxDigits {
		return 0, fmt.Errorf("%q: want 1 to %d hex digits", s, maxDigits)
	}
	for _, c := range s {
		if !strings.ContainsRune("0123456789abcdefABCDEF", c) {
			return 0, fmt.Errorf("%q: not hex", s)
		}
	}
	v, err := strconv.ParseUint(s, 16, 64)
	if err != nil || v > max {
		return 0, fmt.Errorf("%q: above %#x", s, max)
	}
	return v, nil
}
