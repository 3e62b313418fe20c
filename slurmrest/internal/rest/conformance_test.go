package rest

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	gen42 "github.com/onepool/onepool/slurmrest/internal/gen/v0042"
	gen44 "github.com/onepool/onepool/slurmrest/internal/gen/v0044"
	"github.com/onepool/onepool/slurmrest/model"
)

// wireTypes pairs each JSON type onepool reads or writes with the type
// generated for it from each version's spec (make generate).
var wireTypes = []struct {
	name string
	wire any
	gen  map[string]any // version → generated type
}{
	{"node", wireNode{}, map[string]any{"v0.0.42": gen42.V0042Node{}, "v0.0.44": gen44.V0044Node{}}},
	{"nodes answer", nodesResp{}, map[string]any{"v0.0.42": gen42.V0042OpenapiNodesResp{}, "v0.0.44": gen44.V0044OpenapiNodesResp{}}},
	{"node update", updateNodeMsg{}, map[string]any{"v0.0.42": gen42.V0042UpdateNodeMsg{}, "v0.0.44": gen44.V0044UpdateNodeMsg{}}},
	{"partitions answer", partitionsResp{}, map[string]any{"v0.0.42": gen42.V0042OpenapiPartitionResp{}, "v0.0.44": gen44.V0044OpenapiPartitionResp{}}},
	{"job", wireJob{}, map[string]any{"v0.0.42": gen42.V0042JobInfo{}, "v0.0.44": gen44.V0044JobInfo{}}},
	{"jobs answer", jobsResp{}, map[string]any{"v0.0.42": gen42.V0042OpenapiJobInfoResp{}, "v0.0.44": gen44.V0044OpenapiJobInfoResp{}}},
	{"job description", jobDesc{}, map[string]any{"v0.0.42": gen42.V0042JobDescMsg{}, "v0.0.44": gen44.V0044JobDescMsg{}}},
	{"submission", jobReq{}, map[string]any{"v0.0.42": gen42.V0042JobSubmitReq{}, "v0.0.44": gen44.V0044JobSubmitReq{}}},
	{"allocation request", jobReq{}, map[string]any{"v0.0.42": gen42.V0042JobAllocReq{}, "v0.0.44": gen44.V0044JobAllocReq{}}},
	{"submission answer", jobIDResp{}, map[string]any{"v0.0.42": gen42.V0042OpenapiJobSubmitResponse{}, "v0.0.44": gen44.V0044OpenapiJobSubmitResponse{}}},
	{"allocation answer", jobIDResp{}, map[string]any{"v0.0.42": gen42.V0042OpenapiJobAllocResp{}, "v0.0.44": gen44.V0044OpenapiJobAllocResp{}}},
	{"job update answer", jobPostResp{}, map[string]any{"v0.0.42": gen42.V0042OpenapiJobPostResponse{}, "v0.0.44": gen44.V0044OpenapiJobPostResponse{}}},
	{"cancel answer", killJobResp{}, map[string]any{"v0.0.42": gen42.V0042OpenapiKillJobResp{}, "v0.0.44": gen44.V0044OpenapiKillJobResp{}}},
	{"error", apiError{}, map[string]any{"v0.0.42": gen42.V0042OpenapiError{}, "v0.0.44": gen44.V0044OpenapiError{}}},
	{"QOS", wireQOS{}, map[string]any{"v0.0.42": gen42.V0042Qos{}, "v0.0.44": gen44.V0044Qos{}}},
	{"QOS answer", qosResp{}, map[string]any{"v0.0.42": gen42.V0042OpenapiSlurmdbdQosResp{}, "v0.0.44": gen44.V0044OpenapiSlurmdbdQosResp{}}},
	{"TRES", wireTRES{}, map[string]any{"v0.0.42": gen42.V0042Tres{}, "v0.0.44": gen44.V0044Tres{}}},
	{"association", wireAssoc{}, map[string]any{"v0.0.42": gen42.V0042Assoc{}, "v0.0.44": gen44.V0044Assoc{}}},
	{"associations answer", assocsResp{}, map[string]any{"v0.0.42": gen42.V0042OpenapiAssocsResp{}, "v0.0.44": gen44.V0044OpenapiAssocsResp{}}},
	{"cluster", wireCluster{}, map[string]any{"v0.0.42": gen42.V0042ClusterRec{}, "v0.0.44": gen44.V0044ClusterRec{}}},
	{"clusters answer", clustersResp{}, map[string]any{"v0.0.42": gen42.V0042OpenapiClustersResp{}, "v0.0.44": gen44.V0044OpenapiClustersResp{}}},
	{"accounts to add", accountsAddReq{}, map[string]any{"v0.0.42": gen42.V0042OpenapiAccountsAddCondResp{}, "v0.0.44": gen44.V0044OpenapiAccountsAddCondResp{}}},
	{"users to add", usersAddReq{}, map[string]any{"v0.0.42": gen42.V0042OpenapiUsersAddCondResp{}, "v0.0.44": gen44.V0044OpenapiUsersAddCondResp{}}},
	{"new association", assocRecSet{}, map[string]any{"v0.0.42": gen42.V0042AssocRecSet{}, "v0.0.44": gen44.V0044AssocRecSet{}}},
}

// Every field onepool reads or writes exists, with the same JSON name and
// the same kind of value, in the types generated from each version's spec:
// one decoder serves every version only while this holds.
func TestWireMatchesGeneratedTypes(t *testing.T) {
	for _, w := range wireTypes {
		for _, v := range Versions {
			g, ok := w.gen[v]
			require.True(t, ok, "%s: no generated type listed for %s", w.name, v)
			for _, problem := range sameJSON(reflect.TypeOf(w.wire), reflect.TypeOf(g), "") {
				t.Errorf("%s, %s: %s", w.name, v, problem)
			}
		}
	}
}

// The test itself fails when a field is missing or of another kind.
func TestSameJSONFindsDifferences(t *testing.T) {
	type genT struct {
		A *int32   `json:"a,omitempty"`
		B []string `json:"b"`
	}
	type missing struct {
		C *string `json:"c,omitempty"`
	}
	type retyped struct {
		A *string `json:"a,omitempty"`
	}
	type same struct {
		A *int64   `json:"a,omitempty"`
		B []string `json:"b"`
	}
	assert.Equal(t, []string{".c: not in the spec"}, sameJSON(reflect.TypeOf(missing{}), reflect.TypeOf(genT{}), ""))
	assert.Equal(t, []string{".a: string here, number in the spec"}, sameJSON(reflect.TypeOf(retyped{}), reflect.TypeOf(genT{}), ""))
	assert.Empty(t, sameJSON(reflect.TypeOf(same{}), reflect.TypeOf(genT{}), ""))
}

// sameJSON lists how the JSON of wire differs from that of gen, for the
// fields wire has.
func sameJSON(wire, gen reflect.Type, at string) []string {
	wire, gen = deptr(wire), deptr(gen)
	wk, gk := jsonKind(wire), jsonKind(gen)
	if wk != gk {
		return []string{at + ": " + wk + " here, " + gk + " in the spec"}
	}
	switch wk {
	case "array":
		return sameJSON(wire.Elem(), gen.Elem(), at+"[]")
	case "object":
		var out []string
		genFields := jsonFields(gen)
		for name, wf := range jsonFields(wire) {
			gf, ok := genFields[name]
			if !ok {
				out = append(out, at+"."+name+": not in the spec")
				continue
			}
			out = append(out, sameJSON(wf, gf, at+"."+name)...)
		}
		return out
	}
	return nil
}

func deptr(t reflect.Type) reflect.Type {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t
}

func jsonKind(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Float32, reflect.Float64:
		return "number"
	case reflect.String:
		return "string"
	case reflect.Bool:
		return "bool"
	case reflect.Slice, reflect.Array:
		return "array"
	case reflect.Struct, reflect.Map:
		return "object"
	}
	return t.Kind().String()
}

// jsonFields maps a struct's JSON names to their types.
func jsonFields(t reflect.Type) map[string]reflect.Type {
	out := map[string]reflect.Type{}
	if t.Kind() != reflect.Struct {
		return out
	}
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "" || name == "-" {
			continue
		}
		out[name] = f.Type
	}
	return out
}

// Every endpoint onepool calls is in each version's spec with that method.
func TestEndpointsInEverySpec(t *testing.T) {
	used := map[string][]string{
		pathPing: {"get"}, pathNodes: {"get", "post"}, pathNode: {"get", "post", "delete"},
		pathPartitions: {"get"}, pathJobs: {"get"}, pathJobsState: {"get"}, pathJob: {"get", "post", "delete"},
		pathSubmit: {"post"}, pathAllocate: {"post"},
	}
	// slurmdbd's, under /slurmdb/<version>.
	usedDB := map[string][]string{
		pathDBClusters: {"get"}, pathDBQOS: {"get", "post"}, pathDBQOSName: {"get"}, pathDBAssocs: {"get", "post"},
		pathDBAccountsAdd: {"post"}, pathDBUsersAdd: {"post"},
	}
	for _, v := range Versions {
		raw, err := os.ReadFile(filepath.Join("..", "..", "..", "openapi", "slurm-"+v+".json"))
		require.NoError(t, err)
		var spec struct {
			Paths map[string]map[string]json.RawMessage `json:"paths"`
		}
		require.NoError(t, json.Unmarshal(raw, &spec))
		for root, paths := range map[string]map[string][]string{"/slurm/": used, "/slurmdb/": usedDB} {
			for path, methods := range paths {
				ops, ok := spec.Paths[root+v+path]
				if !assert.True(t, ok, "%s: no path %s%s", v, root, path) {
					continue
				}
				for _, m := range methods {
					assert.Contains(t, ops, m, "%s: %s%s has no %s", v, root, path, strings.ToUpper(m))
				}
			}
		}
	}
}

// What a change to an existing QOS or association sends is the object as
// listed with onepool's fields set at paths this file names by hand: each
// such object, and a new QOS, decodes into each version's generated type
// with no field left over.
func TestPatchedObjectsMatchGeneratedTypes(t *testing.T) {
	u := model.QOSUpdate{Description: ptr("d"), Priority: ptr[uint32](10), GraceTimeSeconds: ptr[uint32](30),
		Preempt: &[]string{"low"}, PreemptMode: ptr("cancel"), MaxTRESPerUser: []model.TRES{{Type: "gres", Name: "gpu", Count: 8}}}
	patched := map[string]any{}
	patchQOS(patched, model.QOS{}, u)
	assoc := map[string]any{"user": "alice"}
	setIn(assoc, "normal", "default", "qos")
	assoc["qos"] = []string{"normal"}
	for _, c := range []struct {
		name string
		obj  any
		gen  map[string]any
	}{
		{"new QOS", newQOS("high", u), map[string]any{"v0.0.42": &gen42.V0042Qos{}, "v0.0.44": &gen44.V0044Qos{}}},
		{"changed QOS", patched, map[string]any{"v0.0.42": &gen42.V0042Qos{}, "v0.0.44": &gen44.V0044Qos{}}},
		{"changed association", assoc, map[string]any{"v0.0.42": &gen42.V0042Assoc{}, "v0.0.44": &gen44.V0044Assoc{}}},
	} {
		raw, err := json.Marshal(c.obj)
		require.NoError(t, err)
		for _, v := range Versions {
			d := json.NewDecoder(bytes.NewReader(raw))
			d.DisallowUnknownFields()
			assert.NoError(t, d.Decode(c.gen[v]), "%s, %s: %s", c.name, v, raw)
		}
	}
}
