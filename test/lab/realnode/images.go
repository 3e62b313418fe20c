package realnode

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strings"
	"time"
)

// Image is an image archive of .lab/images (made by `make images`) as
// the real node knows it.
type Image struct {
	Archive string // .lab/images/NAME.tar
	Ref     string // the archive's own name, e.g. onepool/controller-manager:13a76b8
	// Names the image has in containerd after the import: the normalized
	// ref (docker.io/onepool/...: what a pod's `onepool/...:TAG` resolves to),
	// localhost/REPO:TAG (buildah's local name) and localhost/REPO:lab (a
	// stable tag: the newest import wins).
	Names []string
}

// Images lists the archives in ImageDir and the names their images get.
func (n *Node) Images() ([]Image, error) {
	files, err := filepath.Glob(filepath.Join(n.ImageDir, "*.tar"))
	if err != nil {
		return nil, err
	}
	sort.Strings(files)
	var out []Image
	for _, f := range files {
		ref, err := archiveRef(f)
		if err != nil {
			return nil, err
		}
		repo, tag := splitRef(ref)
		out = append(out, Image{Archive: f, Ref: ref, Names: []string{
			normalizeRef(ref), "localhost/" + strings.TrimPrefix(repo, "localhost/") + ":" + tag,
			"localhost/" + strings.TrimPrefix(repo, "localhost/") + ":lab"}})
	}
	return out, nil
}

// Image returns the image whose archive is .lab/images/NAME.tar.
func (n *Node) Image(name string) (Image, error) {
	imgs, err := n.Images()
	if err != nil {
		return Image{}, err
	}
	for _, im := range imgs {
		if filepath.Base(im.Archive) == name+".tar" {
			return im, nil
		}
	}
	return Image{}, fmt.Errorf("no image archive %s.tar in %s: run `make images`", name, n.ImageDir)
}

// archiveRef reads the image name from an OCI archive's index.json
// (annotation org.opencontainers.image.ref.name, as buildah push writes it).
func archiveRef(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return "", fmt.Errorf("%s: no index.json (not an OCI archive)", path)
		}
		if err != nil {
			return "", fmt.Errorf("%s: %w", path, err)
		}
		if strings.TrimPrefix(h.Name, "./") != "index.json" {
			continue
		}
		var idx struct {
			Manifests []struct {
				Annotations map[string]string `json:"annotations"`
			} `json:"manifests"`
		}
		if err := json.NewDecoder(io.LimitReader(tr, 1<<20)).Decode(&idx); err != nil {
			return "", fmt.Errorf("%s: index.json: %w", path, err)
		}
		for _, m := range idx.Manifests {
			if n := m.Annotations["io.containerd.image.name"]; n != "" {
				return n, nil
			}
			if n := m.Annotations["org.opencontainers.image.ref.name"]; strings.ContainsAny(n, "/:") {
				return n, nil
			}
		}
		return "", fmt.Errorf("%s: index.json names no image", path)
	}
}

// splitRef splits repo:tag (a tag is required).
func splitRef(ref string) (string, string) {
	i := strings.LastIndexByte(ref, ':')
	if i < 0 || strings.Contains(ref[i:], "/") {
		return ref, "latest"
	}
	return ref[:i], ref[i+1:]
}

// normalizeRef is what the CRI makes of a pod's image: a name without a
// registry host is on docker.io, a one-part name is under library/.
func normalizeRef(ref string) string {
	first, _, found := strings.Cut(ref, "/")
	if found && (strings.ContainsAny(first, ".:") || first == "localhost") {
		return ref
	}
	if !found {
		ref = "library/" + ref
	}
	return "docker.io/" + ref
}

// pauseArchive is a docker-archive tar of one layer holding bin/pause as
// /pause, named PauseImage. It is byte-for-byte the same for the same binary.
func pauseArchive(pauseBin string) ([]byte, error) {
	bin, err := os.ReadFile(pauseBin)
	if err != nil {
		return nil, err
	}
	epoch := time.Unix(0, 0)
	tarOf := func(files []struct {
		name string
		mode int64
		body []byte
	}) ([]byte, error) {
		var buf bytes.Buffer
		tw := tar.NewWriter(&buf)
		for _, f := range files {
			if err := tw.WriteHeader(&tar.Header{Name: f.name, Mode: f.mode, Size: int64(len(f.body)), ModTime: epoch, Typeflag: tar.TypeReg, Format: tar.FormatPAX}); err != nil {
				return nil, err
			}
			if _, err := tw.Write(f.body); err != nil {
				return nil, err
			}
		}
		err := tw.Close()
		return buf.Bytes(), err
	}
	type file = struct {
		name string
		mode int64
		body []byte
	}
	layer, err := tarOf([]file{{"pause", 0o755, bin}})
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(layer)
	config, err := json.Marshal(map[string]any{
		"architecture": runtime.GOARCH, "os": "linux", "created": epoch.UTC().Format(time.RFC3339),
		"config": map[string]any{"Entrypoint": []string{"/pause"}, "User": "65535:65535"},
		"rootfs": map[string]any{"type": "layers", "diff_ids": []string{"sha256:" + hex.EncodeToString(sum[:])}},
	})
	if err != nil {
		return nil, err
	}
	manifest, err := json.Marshal([]map[string]any{{"Config": "config.json", "RepoTags": []string{PauseImage}, "Layers": []string{"layer.tar"}}})
	if err != nil {
		return nil, err
	}
	return tarOf([]file{{"config.json", 0o644, config}, {"layer.tar", 0o644, layer}, {"manifest.json", 0o644, manifest}})
}

// containerdImages returns the images containerd's k8s.io namespace holds.
func (n *Node) containerdImages(ctx context.Context) (map[string]bool, error) {
	out, err := n.Ctr(ctx, "images", "ls", "-q")
	if err != nil {
		return nil, err
	}
	have := map[string]bool{}
	for _, name := range strings.Fields(string(out)) {
		have[name] = true
	}
	return have, nil
}

// ImportImages imports the pause image and every archive of .lab/images
// into containerd (k8s.io namespace), each under all its Names. An archive
// is imported again only when it changed (size, mtime) or a name is gone.
func (n *Node) ImportImages(ctx context.Context) error {
	pause, err := pauseArchive(filepath.Join(n.BinDir, "pause"))
	if err != nil {
		return fmt.Errorf("pause image: %w", err)
	}
	pauseTar := n.path("images", "pause.tar")
	if err := os.MkdirAll(filepath.Dir(pauseTar), 0o755); err != nil {
		return err
	}
	if old, err := os.ReadFile(pauseTar); err != nil || !bytes.Equal(old, pause) {
		if err := os.WriteFile(pauseTar, pause, 0o644); err != nil {
			return err
		}
	}
	imgs, err := n.Images()
	if err != nil {
		return err
	}
	if len(imgs) == 0 {
		fmt.Fprintf(n.Log, "lab: no image archives in %s (`make images` makes them): only the pause image\n", n.ImageDir)
	}
	have, err := n.containerdImages(ctx)
	if err != nil {
		return err
	}
	all := append([]Image{{Archive: pauseTar, Ref: PauseImage, Names: []string{PauseImage}}}, imgs...)
	var errs []error
	for _, im := range all {
		if err := n.importImage(ctx, im, have); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (n *Node) importImage(ctx context.Context, im Image, have map[string]bool) error {
	st, err := os.Stat(im.Archive)
	if err != nil {
		return err
	}
	stampFile := n.path("images", filepath.Base(im.Archive)+".imported")
	stamp := fmt.Sprintf("%d %d %s\n", st.Size(), st.ModTime().UnixNano(), strings.Join(im.Names, " "))
	if old, _ := os.ReadFile(stampFile); string(old) == stamp {
		missing := false
		for _, name := range im.Names {
			missing = missing || !have[name]
		}
		if !missing {
			return nil
		}
	}
	start := time.Now()
	// ctr names an OCI archive's image after its ref.name annotation as it
	// stands ("onepool/x:tag", which the CRI never looks up): import it
	// under that name, then tag it with the names pods use.
	if _, err := n.Ctr(ctx, "images", "import", im.Archive); err != nil {
		return fmt.Errorf("import %s: %w", im.Archive, err)
	}
	imported := im.Ref
	if !strings.Contains(imported, "/") || im.Ref == PauseImage {
		imported = normalizeRef(im.Ref)
	}
	after, err := n.containerdImages(ctx)
	if err != nil {
		return err
	}
	if !after[imported] {
		return fmt.Errorf("import %s: containerd has no image %q afterwards (it has %s)", im.Archive, imported, strings.Join(sortedKeys(after), ", "))
	}
	for _, name := range im.Names {
		if name == imported {
			continue
		}
		if _, err := n.Ctr(ctx, "images", "tag", "--force", imported, name); err != nil {
			return err
		}
	}
	if imported != normalizeRef(imported) && !slices.Contains(im.Names, imported) {
		// The un-normalized name only confuses `ctr images ls`.
		if _, err := n.Ctr(ctx, "images", "rm", imported); err != nil {
			return err
		}
	}
	fmt.Fprintf(n.Log, "lab: imported %s as %s (%s)\n", filepath.Base(im.Archive), strings.Join(im.Names, ", "), time.Since(start).Round(10*time.Millisecond))
	return os.WriteFile(stampFile, []byte(stamp), 0o644)
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
