package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// diskOf names the device and filesystem that hold dir, and whether the
// kernel calls the device rotational: every commit waits for an fsync
// there, so a figure of commits means little without it. It reads Linux's
// /proc and /sys; elsewhere, or when they cannot be read, it says so.
func diskOf(dir string) string {
	mounts, err := os.ReadFile("/proc/self/mounts")
	if err != nil {
		return "unknown disk (no /proc/self/mounts)"
	}
	if real, err := filepath.EvalSymlinks(dir); err == nil {
		dir = real
	}
	dev, fs, at := mountOf(string(mounts), dir)
	if dev == "" {
		return "unknown disk (no mount holds it)"
	}
	return fmt.Sprintf("%s (%s, mounted at %s), rotational: %s", dev, fs, at, rotational(dev))
}

// mountOf is the device, filesystem type and mount point of the mount in
// mounts (the format of /proc/self/mounts) with the longest mount point
// that holds dir.
func mountOf(mounts, dir string) (dev, fs, at string) {
	for _, line := range strings.Split(mounts, "\n") {
		f := strings.Fields(line)
		if len(f) < 3 || !holds(f[1], dir) || len(f[1]) < len(at) {
			continue
		}
		dev, at, fs = f[0], f[1], f[2]
	}
	return dev, fs, at
}

// holds reports whether mount point m holds path p.
func holds(m, p string) bool {
	return m == "/" || p == m || strings.HasPrefix(p, m+"/")
}

// rotational is what /sys says of the block device dev (a partition
// reads its disk's), or "unknown".
func rotational(dev string) string {
	base := filepath.Base(dev)
	for _, p := range []string{"/sys/class/block/" + base + "/queue/rotational", "/sys/class/block/" + base + "/../queue/rotational"} {
		if b, err := os.ReadFile(p); err == nil {
			return strings.TrimSpace(string(b))
		}
	}
	return "unknown"
}
