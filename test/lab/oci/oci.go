// Package oci writes container images as OCI archives (the format
// `ctr images import` and `skopeo copy oci-archive:` read) from layer tars
// made here: a folder tree or a handful of files. No daemon, registry or
// package install is involved, so an image of binaries already built over
// a rootfs already built takes seconds.
//
// Layers are uncompressed tars (media type ...layer.v1.tar): the digest is
// the diff ID, a layer shared by several images has one digest in all, and
// nothing is spent compressing what only travels on this machine.
package oci

import (
	"archive/tar"
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"
)

const (
	mediaManifest = "application/vnd.oci.image.manifest.v1+json"
	mediaConfig   = "application/vnd.oci.image.config.v1+json"
	mediaLayer    = "application/vnd.oci.image.layer.v1.tar"
	// AnnotationRefName names an image in an archive's index.json.
	AnnotationRefName = "org.opencontainers.image.ref.name"
)

// Layer is a layer tar on disk and its digest ("sha256:...").
type Layer struct {
	Path   string
	Digest string
	Size   int64
}

// Config is the part of an image's configuration a Dockerfile sets.
type Config struct {
	Entrypoint []string
	Cmd        []string
	User       string
	Env        []string
	WorkingDir string
	Labels     map[string]string
}

// File is one entry of a layer made from files.
type File struct {
	Name    string // path in the image, without a leading slash
	Mode    os.FileMode
	Content []byte // a regular file's bytes; nil with Mode.IsDir() for a folder
	Source  string // or a file on disk to copy (Content nil)
	UID     int
	GID     int
}

// hashWriter counts and hashes what goes through it.
type hashWriter struct {
	w io.Writer
	h hash.Hash
	n int64
}

func (h *hashWriter) Write(p []byte) (int, error) {
	n, err := h.w.Write(p)
	h.h.Write(p[:n])
	h.n += int64(n)
	return n, err
}

// writeLayer creates path, lets fill write the tar, and returns the layer.
// A layer cut off midway is removed.
func writeLayer(path string, fill func(*tar.Writer) error) (l Layer, err error) {
	f, err := os.Create(path)
	if err != nil {
		return Layer{}, err
	}
	defer func() {
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			_ = os.Remove(path)
		}
	}()
	bw := bufio.NewWriterSize(f, 1<<20)
	hw := &hashWriter{w: bw, h: sha256.New()}
	tw := tar.NewWriter(hw)
	if err := fill(tw); err != nil {
		return Layer{}, err
	}
	if err := tw.Close(); err != nil {
		return Layer{}, err
	}
	if err := bw.Flush(); err != nil {
		return Layer{}, err
	}
	return Layer{Path: path, Digest: "sha256:" + hex.EncodeToString(hw.h.Sum(nil)), Size: hw.n}, nil
}

// fixedTime stamps the entries of layers made from files, so the same
// files make the same digest.
var fixedTime = time.Unix(0, 0).UTC()

// LayerFromFiles writes a layer of the given files (folders named before
// what they hold are kept; missing parent folders are added, mode 0755).
func LayerFromFiles(path string, files []File) (Layer, error) {
	return writeLayer(path, func(tw *tar.Writer) error {
		seen := map[string]bool{}
		var parents func(name string) error
		parents = func(name string) error {
			dir := filepath.Dir(name)
			if dir == "." || dir == "/" || seen[dir] {
				return nil
			}
			if err := parents(dir); err != nil {
				return err
			}
			seen[dir] = true
			return tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: dir + "/", Mode: 0o755, ModTime: fixedTime, Format: tar.FormatPAX})
		}
		for _, f := range files {
			name := strings.TrimPrefix(filepath.Clean(f.Name), "/")
			if err := parents(name); err != nil {
				return err
			}
			if f.Mode.IsDir() {
				seen[name] = true
				if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: name + "/", Mode: int64(f.Mode.Perm()), Uid: f.UID, Gid: f.GID, ModTime: fixedTime, Format: tar.FormatPAX}); err != nil {
					return err
				}
				continue
			}
			content := f.Content
			if content == nil {
				b, err := os.ReadFile(f.Source)
				if err != nil {
					return err
				}
				content = b
			}
			hdr := &tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: int64(f.Mode.Perm()), Size: int64(len(content)), Uid: f.UID, Gid: f.GID, ModTime: fixedTime, Format: tar.FormatPAX}
			if err := tw.WriteHeader(hdr); err != nil {
				return err
			}
			if _, err := tw.Write(content); err != nil {
				return err
			}
		}
		return nil
	})
}

// LayerFromDir writes a layer of the tree under root, as it is on disk
// (owners, modes, times, links, device nodes). skip, given a path relative
// to root ("usr/share/doc"), leaves that entry out, and a folder's whole
// content with it; mounts under root are never entered (only the folder
// they sit on is kept). Hard links stay hard links.
func LayerFromDir(path, root string, skip func(rel string) bool) (Layer, error) {
	var rootStat syscall.Stat_t
	if err := syscall.Lstat(root, &rootStat); err != nil {
		return Layer{}, fmt.Errorf("layer of %s: %w", root, err)
	}
	return writeLayer(path, func(tw *tar.Writer) error {
		links := map[[2]uint64]string{} // (dev, inode) -> first name
		return walkSorted(root, "", func(rel string, fi fs.FileInfo, st *syscall.Stat_t) (bool, error) {
			if skip != nil && skip(rel) {
				return false, nil
			}
			link := ""
			if fi.Mode()&fs.ModeSymlink != 0 {
				var err error
				if link, err = os.Readlink(filepath.Join(root, rel)); err != nil {
					return false, err
				}
			}
			hdr, err := tar.FileInfoHeader(fi, link)
			if err != nil {
				return false, fmt.Errorf("%s: %w", rel, err)
			}
			hdr.Name = rel
			hdr.Uname, hdr.Gname = "", ""
			hdr.Format = tar.FormatPAX
			hdr.AccessTime, hdr.ChangeTime = time.Time{}, time.Time{}
			if fi.IsDir() {
				hdr.Name += "/"
			}
			if fi.Mode().IsRegular() && st.Nlink > 1 {
				key := [2]uint64{st.Dev, st.Ino}
				if first, ok := links[key]; ok {
					hdr.Typeflag, hdr.Linkname, hdr.Size = tar.TypeLink, first, 0
				} else {
					links[key] = rel
				}
			}
			if err := tw.WriteHeader(hdr); err != nil {
				return false, err
			}
			if hdr.Typeflag == tar.TypeReg && hdr.Size > 0 {
				f, err := os.Open(filepath.Join(root, rel))
				if err != nil {
					return false, err
				}
				_, err = io.CopyN(tw, f, hdr.Size)
				f.Close()
				if err != nil {
					return false, fmt.Errorf("%s: %w", rel, err)
				}
			}
			// Into folders of the same filesystem only: a mount's content
			// is not the tree's.
			return fi.IsDir() && st.Dev == rootStat.Dev, nil
		})
	})
}

// walkSorted visits every entry under root/rel in name order; visit says
// whether to go into a folder.
func walkSorted(root, rel string, visit func(rel string, fi fs.FileInfo, st *syscall.Stat_t) (bool, error)) error {
	entries, err := os.ReadDir(filepath.Join(root, rel))
	if err != nil {
		return err
	}
	names := make([]string, 0, len(entries))
	for _, e := range entries {
		names = append(names, e.Name())
	}
	sort.Strings(names)
	for _, name := range names {
		r := filepath.Join(rel, name)
		fi, err := os.Lstat(filepath.Join(root, r))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return err
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		if !ok {
			return fmt.Errorf("%s: no stat", r)
		}
		into, err := visit(r, fi, st)
		if err != nil {
			return err
		}
		if into {
			if err := walkSorted(root, r, visit); err != nil {
				return err
			}
		}
	}
	return nil
}

// blob is one content-addressed entry of an archive.
type blob struct {
	digest string
	path   string // on disk, or
	data   []byte // in memory
	size   int64
}

func memBlob(data []byte) blob {
	sum := sha256.Sum256(data)
	return blob{digest: "sha256:" + hex.EncodeToString(sum[:]), data: data, size: int64(len(data))}
}

// WriteArchive writes an OCI archive at path holding one image named ref
// (e.g. onepool/scheduler:abc123): the layers in order, then the config.
// It is written next to path and renamed, so a cut-off write leaves no
// archive.
func WriteArchive(path, ref string, cfg Config, layers []Layer) error {
	diffIDs := make([]string, len(layers))
	descs := make([]map[string]any, len(layers))
	blobs := make([]blob, 0, len(layers)+2)
	for i, l := range layers {
		diffIDs[i] = l.Digest
		descs[i] = map[string]any{"mediaType": mediaLayer, "digest": l.Digest, "size": l.Size}
		blobs = append(blobs, blob{digest: l.Digest, path: l.Path, size: l.Size})
	}
	imgCfg := map[string]any{}
	if len(cfg.Entrypoint) > 0 {
		imgCfg["Entrypoint"] = cfg.Entrypoint
	}
	if len(cfg.Cmd) > 0 {
		imgCfg["Cmd"] = cfg.Cmd
	}
	if cfg.User != "" {
		imgCfg["User"] = cfg.User
	}
	if len(cfg.Env) > 0 {
		imgCfg["Env"] = cfg.Env
	}
	if cfg.WorkingDir != "" {
		imgCfg["WorkingDir"] = cfg.WorkingDir
	}
	if len(cfg.Labels) > 0 {
		imgCfg["Labels"] = cfg.Labels
	}
	config, err := json.Marshal(map[string]any{
		"architecture": "amd64", "os": "linux", "config": imgCfg,
		"rootfs": map[string]any{"type": "layers", "diff_ids": diffIDs},
	})
	if err != nil {
		return err
	}
	cb := memBlob(config)
	manifest, err := json.Marshal(map[string]any{
		"schemaVersion": 2, "mediaType": mediaManifest,
		"config": map[string]any{"mediaType": mediaConfig, "digest": cb.digest, "size": cb.size},
		"layers": descs,
	})
	if err != nil {
		return err
	}
	mb := memBlob(manifest)
	index, err := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"manifests": []map[string]any{{"mediaType": mediaManifest, "digest": mb.digest, "size": mb.size,
			"annotations": map[string]string{AnnotationRefName: ref}}},
	})
	if err != nil {
		return err
	}
	blobs = append(blobs, cb, mb)

	tmp := path + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	ok := false
	defer func() {
		if !ok {
			f.Close()
			_ = os.Remove(tmp)
		}
	}()
	bw := bufio.NewWriterSize(f, 1<<20)
	tw := tar.NewWriter(bw)
	put := func(name string, data []byte) error {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o644, Size: int64(len(data)), ModTime: fixedTime}); err != nil {
			return err
		}
		_, err := tw.Write(data)
		return err
	}
	if err := put("oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`)); err != nil {
		return err
	}
	if err := put("index.json", index); err != nil {
		return err
	}
	for _, dir := range []string{"blobs/", "blobs/sha256/"} {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: dir, Mode: 0o755, ModTime: fixedTime}); err != nil {
			return err
		}
	}
	written := map[string]bool{}
	for _, b := range blobs {
		if written[b.digest] {
			continue
		}
		written[b.digest] = true
		name := "blobs/sha256/" + strings.TrimPrefix(b.digest, "sha256:")
		if b.data != nil {
			if err := put(name, b.data); err != nil {
				return err
			}
			continue
		}
		if err := copyBlob(tw, name, b); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	if err := bw.Flush(); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	ok = true
	return os.Rename(tmp, path)
}

// copyBlob copies a layer file into the archive, checking it is still the
// layer its digest names.
func copyBlob(tw *tar.Writer, name string, b blob) error {
	src, err := os.Open(b.path)
	if err != nil {
		return err
	}
	defer src.Close()
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o644, Size: b.size, ModTime: fixedTime}); err != nil {
		return err
	}
	h := sha256.New()
	if _, err := io.CopyN(io.MultiWriter(tw, h), src, b.size); err != nil {
		return fmt.Errorf("layer %s: %w", b.path, err)
	}
	if got := "sha256:" + hex.EncodeToString(h.Sum(nil)); got != b.digest {
		return fmt.Errorf("layer %s changed: digest %s, want %s", b.path, got, b.digest)
	}
	return nil
}

// SaveLayer records a layer's digest and size beside its tar
// (PATH.digest), so a later run reuses it without reading it again.
func SaveLayer(l Layer) error {
	return os.WriteFile(l.Path+".digest", []byte(fmt.Sprintf("%s %d\n", l.Digest, l.Size)), 0o644)
}

// LoadLayer reads what SaveLayer wrote, and checks the tar's size still
// matches.
func LoadLayer(path string) (Layer, error) {
	b, err := os.ReadFile(path + ".digest")
	if err != nil {
		return Layer{}, err
	}
	var l Layer
	if _, err := fmt.Sscanf(string(b), "%s %d", &l.Digest, &l.Size); err != nil {
		return Layer{}, fmt.Errorf("%s.digest: %w", path, err)
	}
	st, err := os.Stat(path)
	if err != nil {
		return Layer{}, err
	}
	if st.Size() != l.Size {
		return Layer{}, fmt.Errorf("%s: %d bytes, its digest file says %d", path, st.Size(), l.Size)
	}
	l.Path = path
	return l, nil
}
