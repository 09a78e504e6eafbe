package selftest

import (
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// ErrBadUUID is returned by ParseUUID for text that is not a UUID.
var ErrBadUUID = errors.New("not a UUID")

// FormatUUID formats 16 bytes the way NVML prints GPU UUIDs:
// "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx", lower-case hex in byte order.
// For NVIDIA GPUs VkPhysicalDeviceIDProperties.deviceUUID and
// EGL_DEVICE_UUID_EXT are the same 16 bytes as the NVML UUID, so the
// formatted strings compare equal.
func FormatUUID(b [16]byte) string {
	h := hex.EncodeToString(b[:])
	return "GPU-" + h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
}

// ParseUUID parses a UUID with or without a "GPU-" or "MIG-" prefix, in
// either case, with or without the four dashes in the usual places. It
// returns an error wrapping ErrBadUUID for anything else.
func ParseUUID(s string) ([16]byte, error) {
	var out [16]byte
	t := s
	if len(t) >= 4 && (strings.EqualFold(t[:4], "GPU-") || strings.EqualFold(t[:4], "MIG-")) {
		t = t[4:]
	}
	if len(t) == 36 {
		if t[8] != '-' || t[13] != '-' || t[18] != '-' || t[23] != '-' {
			return out, fmt.Errorf("%q: %w", s, ErrBadUUID)
		}
		t = t[0:8] + t[9:13] + t[14:18] + t[19:23] + t[24:]
	}
	if len(t) != 32 {
		return out, fmt.Errorf("%q: %w", s, ErrBadUUID)
	}
	if _, err := hex.Decode(out[:], []byte(t)); err != nil {
		return out, fmt.Errorf("%q: %w", s, ErrBadUUID)
	}
	return out, nil
}

// sameUUID reports whether a and b are the same UUID in any of the forms
// ParseUUID accepts; text that does not parse never matches.
func sameUUID(a, b string) bool {
	x, err := ParseUUID(a)
	if err != nil {
		return false
	}
	y, err := ParseUUID(b)
	return err == nil && x == y
}

// vkVersion formats a VK_MAKE_API_VERSION value as "major.minor.patch"
// (Vulkan spec, "Version Numbers"; the variant bits are ignored).
func vkVersion(v uint32) string {
	return fmt.Sprintf("%d.%d.%d", (v>>22)&0x7f, (v>>12)&0x3ff, v&0xfff)
}

func quote(s string) string { return strconv.Quote(s) }
func itoa(i int) string     { return strconv.Itoa(i) }
func hex4(v uint32) string  { return fmt.Sprintf("0x%04x", v) }
