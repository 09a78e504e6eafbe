package upstream

import (
	"archive/tar"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"
)

// Image is an OCI image built from directories on this machine, for a
// containerd that can reach no registry (WriteOCIArchive).
type Image struct {
	// Ref is the image's name ("localhost/nodeprep-probe:test"), set as
	// the index's org.opencontainers.image.ref.name and
	// io.containerd.image.name annotations, which `ctr images import`
	// names it by.
	Ref string
	// Layers are directories, each packed as one uncompressed layer, the
	// first the lowest.
	Layers []string
	// Entrypoint is the config's Entrypoint.
	Entrypoint []string
	// Env is the config's Env (PATH=... when empty).
	Env []string
}

// WriteOCIArchive writes img as an OCI image layout in a tar archive at
// path (image-spec v1.1 image-layout: oci-layout, index.json, blobs) for
// `ctr images import`. Files keep their modes; owners become root;
// device nodes, sockets and FIFOs are left out. Errors name the file.
func WriteOCIArchive(path string, img Image) error {
	blobs := map[string][]byte{} // small blobs (config, manifest)
	type layer struct {
		file, digest string
		size         int64
		diffID       string
	}
	tmp, err := os.MkdirTemp(filepath.Dir(path), ".oci-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	var layers []layer
	for i, dir := range img.Layers {
		f := filepath.Join(tmp, fmt.Sprintf("layer%d.tar", i))
		d, n, err := tarDir(dir, f)
		if err != nil {
			return fmt.Errorf("packing layer %s: %w", dir, err)
		}
		layers = append(layers, layer{file: f, digest: "sha256:" + d, size: n, diffID: "sha256:" + d})
	}
	env := img.Env
	if len(env) == 0 {
		env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
	}
	diffIDs := make([]string, len(layers))
	for i, l := range layers {
		diffIDs[i] = l.diffID
	}
	config, _ := json.Marshal(map[string]any{
		"architecture": runtime.GOARCH,
		"os":           "linux",
		"config":       map[string]any{"Entrypoint": img.Entrypoint, "Env": env},
		"rootfs":       map[string]any{"type": "layers", "diff_ids": diffIDs},
	})
	cd := digest(config)
	blobs[cd] = config
	ml := make([]map[string]any, len(layers))
	for i, l := range layers {
		ml[i] = map[string]any{"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": l.digest, "size": l.size}
	}
	manifest, _ := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"mediaType":     "application/vnd.oci.image.manifest.v1+json",
		"config":        map[string]any{"mediaType": "application/vnd.oci.image.config.v1+json", "digest": "sha256:" + cd, "size": len(config)},
		"layers":        ml,
	})
	md := digest(manifest)
	blobs[md] = manifest
	index, _ := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"mediaType":     "application/vnd.oci.image.index.v1+json",
		"manifests": []map[string]any{{
			"mediaType":   "application/vnd.oci.image.manifest.v1+json",
			"digest":      "sha256:" + md,
			"size":        len(manifest),
			"platform":    map[string]string{"architecture": runtime.GOARCH, "os": "linux"},
			"annotations": map[string]string{"org.opencontainers.image.ref.name": img.Ref, "io.containerd.image.name": img.Ref},
		}},
	})

	out, err := os.Create(path)
	if err != nil {
		return err
	}
	tw := tar.NewWriter(out)
	put := func(name string, data []byte) error {
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(data)), Typeflag: tar.TypeReg}); err != nil {
			return err
		}
		_, err := tw.Write(data)
		return err
	}
	err = put("oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`))
	if err == nil {
		err = put("index.json", index)
	}
	for d, data := range blobs {
		if err == nil {
			err = put("blobs/sha256/"+d, data)
		}
	}
	for _, l := range layers {
		if err != nil {
			break
		}
		var f *os.File
		if f, err = os.Open(l.file); err != nil {
			break
		}
		if err = tw.WriteHeader(&tar.Header{Name: "blobs/sha256/" + strings.TrimPrefix(l.digest, "sha256:"), Mode: 0o644, Size: l.size, Typeflag: tar.TypeReg}); err == nil {
			_, err = io.Copy(tw, f)
		}
		f.Close()
	}
	if err == nil {
		err = tw.Close()
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("writing the OCI archive %s: %w", path, err)
	}
	return nil
}

func digest(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// tarDir packs dir into the tar file out and returns its sha256 and size.
func tarDir(dir, out string) (string, int64, error) {
	f, err := os.Create(out)
	if err != nil {
		return "", 0, err
	}
	defer f.Close()
	h := sha256.New()
	cw := &countWriter{w: io.MultiWriter(f, h)}
	tw := tar.NewWriter(cw)
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		mode := info.Mode()
		if !mode.IsRegular() && !mode.IsDir() && mode&fs.ModeSymlink == 0 {
			return nil
		}
		link := ""
		if mode&fs.ModeSymlink != 0 {
			if link, err = os.Readlink(p); err != nil {
				return err
			}
		}
		hdr, err := tar.FileInfoHeader(info, link)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		hdr.Name = filepath.ToSlash(rel)
		if mode.IsDir() {
			hdr.Name += "/"
		}
		hdr.Uid, hdr.Gid, hdr.Uname, hdr.Gname = 0, 0, "", ""
		hdr.Format = tar.FormatPAX
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if mode.IsRegular() {
			src, err := os.Open(p)
			if err != nil {
				return err
			}
			_, err = io.Copy(tw, src)
			src.Close()
			return err
		}
		return nil
	})
	if err == nil {
		err = tw.Close()
	}
	return hex.EncodeToString(h.Sum(nil)), cw.n, err
}

type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}
