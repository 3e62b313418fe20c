package images

import (
	"debug/elf"
	"errors"
	"fmt"
)

// PluginRelease is the Slurm release ("24.11") a Slurm plugin was built
// for: its plugin_version symbol, which spank.h sets to the headers'
// SLURM_VERSION_NUMBER (0xMMmmuu). slurmd loads a plugin only when its
// major and minor are slurmd's own ("incompatible plugin version"), so an
// image whose jail plugin was built against another release's headers
// fails every job step.
func PluginRelease(path string) (string, error) {
	f, err := elf.Open(path)
	if err != nil {
		return "", fmt.Errorf("plugin %s: %w", path, err)
	}
	defer f.Close()
	syms, err := f.DynamicSymbols()
	if err != nil {
		return "", fmt.Errorf("plugin %s: %w", path, err)
	}
	for _, s := range syms {
		if s.Name != "plugin_version" {
			continue
		}
		if int(s.Section) >= len(f.Sections) || s.Size != 4 {
			return "", fmt.Errorf("plugin %s: plugin_version is not a 4-byte constant", path)
		}
		sec := f.Sections[s.Section]
		data, err := sec.Data()
		if err != nil {
			return "", fmt.Errorf("plugin %s: plugin_version in %s: %w", path, sec.Name, err)
		}
		off := s.Value - sec.Addr
		if s.Value < sec.Addr || off+4 > uint64(len(data)) {
			return "", fmt.Errorf("plugin %s: plugin_version lies outside %s", path, sec.Name)
		}
		v := f.ByteOrder.Uint32(data[off : off+4])
		return fmt.Sprintf("%d.%02d", v>>16, (v>>8)&0xff), nil
	}
	return "", fmt.Errorf("plugin %s: %w", path, errNoPluginVersion)
}

var errNoPluginVersion = errors.New("no plugin_version symbol: not a Slurm plugin")

// checkPlugin fails unless the plugin at path was built for release.
func checkPlugin(path, release string) error {
	got, err := PluginRelease(path)
	if err != nil {
		return err
	}
	if got != release {
		return fmt.Errorf("the jail plugin %s was built for Slurm %s, the images are Slurm %s's: slurmd would refuse it; "+
			"build it against that release's headers (`make images SLURM=%s` does)", path, got, release, release)
	}
	return nil
}
