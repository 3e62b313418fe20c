package rest

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The ids /jobs/state/ names jobs by: plain, as numbers or strings (24.11
// sends strings), an array's records (Slurm 26.05.5 answered "186_0" for
// job 186, task 0 of array 185, beside plain ids: before, the whole
// answer was refused and the job cache listed every job instead), and a
// heterogeneous job's components, which are left out.
func TestJobStateID(t *testing.T) {
	for _, tc := range []struct {
		raw    string
		id     uint32
		listed bool
		err    bool
	}{
		{raw: `"183"`, id: 183, listed: true},
		{raw: `183`, id: 183, listed: true},
		{raw: `"186_0"`, id: 186, listed: true},
		{raw: `"185_[7-100]"`, id: 185, listed: true},
		{raw: `"185_[1,3,5-9]"`, id: 185, listed: true},
		{raw: `"200+1"`, listed: false},
		{raw: `"0"`, err: true},
		{raw: `""`, err: true},
		{raw: `"x"`, err: true},
		{raw: `"186_"`, err: true},
		{raw: `"186_x"`, err: true},
		{raw: `"185_[]"`, err: true},
		{raw: `"185_[1-3"`, err: true},
		{raw: `"_0"`, err: true},
		{raw: `"200+"`, err: true},
		{raw: `"4294967296"`, err: true},
		{raw: `null`, err: true},
	} {
		t.Run(tc.raw, func(t *testing.T) {
			id, listed, err := jobStateID(json.RawMessage(tc.raw))
			if tc.err {
				require.Error(t, err)
				assert.Contains(t, err.Error(), "is not a job id")
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.listed, listed)
			assert.Equal(t, tc.id, id)
		})
	}
}

// One answer with an array's tasks and a malformed id: one entry per
// record (the array's own record is named once per pending task), the
// malformed id refuses the answer (nothing half-read).
func TestDecodeJobStatesArrays(t *testing.T) {
	got, err := DecodeJobStates([]byte(`{"jobs":[{"job_id":"183","state":["CANCELLED"]},
		{"job_id":"186_0","state":["PENDING"]},{"job_id":"185_2","state":["PENDING"]},
		{"job_id":"185_3","state":["PENDING"]},{"job_id":"184_[4-9]","state":["PENDING"]},
		{"job_id":"200+1","state":["RUNNING"]}]}`))
	require.NoError(t, err)
	ids := make([]uint32, len(got))
	for i, s := range got {
		ids[i] = s.ID
	}
	assert.Equal(t, []uint32{183, 186, 185, 184}, ids)
	assert.Equal(t, "PENDING", got[1].State.Base())

	_, err = DecodeJobStates([]byte(`{"jobs":[{"job_id":"183","state":["RUNNING"]},{"job_id":"x","state":["RUNNING"]}]}`))
	require.Error(t, err)
}
