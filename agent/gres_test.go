package agent

import (
	"reflect"
	"testing"
)

func TestTypeName(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"NVIDIA H100 80GB HBM3", "nvidia_h100_80gb_hbm3"},
		{"NVIDIA A100-SXM4-80GB", "nvidia_a100-sxm4-80gb"},
		{"Tesla T4", "tesla_t4"},
		{"NVIDIA H200", "nvidia_h200"},
		{"NVIDIA GeForce RTX 4090", "nvidia_geforce_rtx_4090"},
		{"NVIDIA  L40S", "nvidia__l40s"}, // every space, as Slurm does: no collapsing
		{"already_lower", "already_lower"},
		{"Tab\tStays", "tab\tstays"}, // only ' ' becomes '_'
		{"ÄB", "Äb"},                 // C-locale tolower: non-ASCII bytes unchanged
		{"", ""},
	} {
		if got := TypeName(tc.in); got != tc.want {
			t.Errorf("TypeName(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func gpus(name string, devices ...string) []GPU {
	out := make([]GPU, len(devices))
	for i, d := range devices {
		out[i] = GPU{Index: i, Name: name, Minor: i, Device: d}
	}
	return out
}

func TestGresConfAndString(t *testing.T) {
	const h100 = "NVIDIA H100 80GB HBM3"
	const header = "# Written by onepool-node-agent at every start; edits are lost.\nAutoDetect=off\n"
	mixed := append(gpus("NVIDIA A100-SXM4-80GB", "/dev/nvidia0", "/dev/nvidia1"),
		gpus(h100, "/dev/nvidia2", "/dev/nvidia3", "/dev/nvidia4", "/dev/nvidia5", "/dev/nvidia6", "/dev/nvidia7")...)
	for _, tc := range []struct {
		name     string
		gpus     []GPU
		wantConf string
		wantGres string
	}{
		{"eight in a row", gpus(h100, "/dev/nvidia0", "/dev/nvidia1", "/dev/nvidia2", "/dev/nvidia3", "/dev/nvidia4", "/dev/nvidia5", "/dev/nvidia6", "/dev/nvidia7"),
			"Name=gpu Type=nvidia_h100_80gb_hbm3 File=/dev/nvidia[0-7]\n", "gpu:nvidia_h100_80gb_hbm3:8"},
		{"unsorted input is sorted numerically", gpus(h100, "/dev/nvidia10", "/dev/nvidia9", "/dev/nvidia8"),
			"Name=gpu Type=nvidia_h100_80gb_hbm3 File=/dev/nvidia[8-10]\n", "gpu:nvidia_h100_80gb_hbm3:3"},
		{"one GPU: no brackets", gpus(h100, "/dev/nvidia3"),
			"Name=gpu Type=nvidia_h100_80gb_hbm3 File=/dev/nvidia3\n", "gpu:nvidia_h100_80gb_hbm3:1"},
		{"gap: runs and singles", gpus(h100, "/dev/nvidia0", "/dev/nvidia1", "/dev/nvidia3", "/dev/nvidia5", "/dev/nvidia6"),
			"Name=gpu Type=nvidia_h100_80gb_hbm3 File=/dev/nvidia[0-1]\nName=gpu Type=nvidia_h100_80gb_hbm3 File=/dev/nvidia3\nName=gpu Type=nvidia_h100_80gb_hbm3 File=/dev/nvidia[5-6]\n",
			"gpu:nvidia_h100_80gb_hbm3:5"},
		{"lab fake devices", gpus("NVIDIA H100 80GB HBM3", "/var/lib/fakegpu/nvidia0", "/var/lib/fakegpu/nvidia1"),
			"Name=gpu Type=nvidia_h100_80gb_hbm3 File=/var/lib/fakegpu/nvidia[0-1]\n", "gpu:nvidia_h100_80gb_hbm3:2"},
		{"different prefixes never share a range", gpus(h100, "/a/nvidia0", "/b/nvidia1"),
			"Name=gpu Type=nvidia_h100_80gb_hbm3 File=/a/nvidia0\nName=gpu Type=nvidia_h100_80gb_hbm3 File=/b/nvidia1\n", "gpu:nvidia_h100_80gb_hbm3:2"},
		{"leading zero stays literal", gpus(h100, "/dev/gpu00", "/dev/gpu01"),
			"Name=gpu Type=nvidia_h100_80gb_hbm3 File=/dev/gpu00\nName=gpu Type=nvidia_h100_80gb_hbm3 File=/dev/gpu01\n", "gpu:nvidia_h100_80gb_hbm3:2"},
		{"mixed types: one line per type, types sorted", mixed,
			"Name=gpu Type=nvidia_a100-sxm4-80gb File=/dev/nvidia[0-1]\nName=gpu Type=nvidia_h100_80gb_hbm3 File=/dev/nvidia[2-7]\n",
			"gpu:nvidia_a100-sxm4-80gb:2,gpu:nvidia_h100_80gb_hbm3:6"},
		{"no GPUs", nil, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := GresConf(tc.gpus); got != header+tc.wantConf {
				t.Errorf("GresConf =\n%s\nwant\n%s%s", got, header, tc.wantConf)
			}
			if got := GresString(tc.gpus); got != tc.wantGres {
				t.Errorf("GresString = %q, want %q", got, tc.wantGres)
			}
		})
	}
}

func TestNodeConfString(t *testing.T) {
	for _, tc := range []struct {
		conf NodeConf
		want string
	}{
		{NodeConf{CPUs: 224, RealMemoryMB: 2063723, Gres: "gpu:nvidia_h100_80gb_hbm3:8"},
			"CPUs=224 RealMemory=2063723 Gres=gpu:nvidia_h100_80gb_hbm3:8"},
		{NodeConf{CPUs: 4, RealMemoryMB: 16000, Gres: "gpu:h100:8", Features: []string{"x", "rack-1"}, Port: 17010},
			"CPUs=4 RealMemory=16000 Gres=gpu:h100:8 Feature=x,rack-1 Port=17010"},
		{NodeConf{CPUs: 2, RealMemoryMB: 1000}, "CPUs=2 RealMemory=1000"},
		{NodeConf{CPUs: 2, RealMemoryMB: 1000, Features: []string{"gpu"}, NodeAddr: "10.89.0.7"}, "CPUs=2 RealMemory=1000 Feature=gpu NodeAddr=10.89.0.7"},
		{NodeConf{CPUs: 2, RealMemoryMB: 1000, Gres: "gpu:a:2,gpu:b:6"}, "CPUs=2 RealMemory=1000 Gres=gpu:a:2,gpu:b:6"},
	} {
		if got := tc.conf.String(); got != tc.want {
			t.Errorf("NodeConf.String() = %q, want %q", got, tc.want)
		}
	}
}

func TestParseFeatures(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    []string
		wantErr bool
	}{
		{"", nil, false},
		{"h100,nvlink", []string{"h100", "nvlink"}, false},
		{" a , b_c.d-e ,", []string{"a", "b_c.d-e"}, false},
		{"a b", nil, true},
		{"a&b", nil, true},
		{"x=1", nil, true},
		{"[a]", nil, true},
	} {
		got, err := ParseFeatures(tc.in)
		if (err != nil) != tc.wantErr || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("ParseFeatures(%q) = %q, %v; want %q, err %v", tc.in, got, err, tc.want, tc.wantErr)
		}
	}
}

func TestValidateNodeName(t *testing.T) {
	for _, tc := range []struct {
		name string
		ok   bool
	}{
		{"gpu-0", true},
		{"ip-10-0-0-1.ec2.internal", true},
		{"Node7", true},
		{"", false},
		{"-gpu", false},
		{"gpu-", false},
		{"gpu[0-3]", false},
		{"a,b", false},
		{"a b", false},
		{"a_b", false},
		{"a..b", false},
	} {
		if err := ValidateNodeName(tc.name); (err == nil) != tc.ok {
			t.Errorf("ValidateNodeName(%q) = %v, want ok=%v", tc.name, err, tc.ok)
		}
	}
}
