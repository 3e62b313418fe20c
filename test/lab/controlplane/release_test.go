package controlplane

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestKubeNamed(t *testing.T) {
	for _, tc := range []struct {
		name, want, wantBinary, wantErr string
	}{
		{name: "", want: "1.35", wantBinary: "kube-apiserver"},
		{name: "1.35", want: "1.35", wantBinary: "kube-apiserver"},
		{name: "1.36", want: "1.36", wantBinary: "kube-apiserver-1.36"},
		{name: "1.34", wantErr: `ONEPOOL_LAB_KUBE="1.34": the lab runs Kubernetes 1.35 or 1.36`},
		{name: "v1.36.3", wantErr: `the lab runs Kubernetes 1.35 or 1.36`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := KubeNamed(tc.name)
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, r.Minor)
			assert.Equal(t, "/b/"+tc.wantBinary, ControlPlane{BinDir: "/b", Kube: r}.apiServerBinary())
		})
	}
	assert.Equal(t, "/b/kube-apiserver", ControlPlane{BinDir: "/b"}.apiServerBinary(), "no release named: the first")
}

func TestCheckVersion(t *testing.T) {
	r136, err := KubeNamed("1.36")
	require.NoError(t, err)
	for _, tc := range []struct {
		name, body, wantErr string
	}{
		{name: "the release asked", body: `{"major":"1","minor":"36","gitVersion":"v1.36.3"}`},
		{name: "another release", body: `{"gitVersion":"v1.35.4"}`, wantErr: `kube-apiserver runs "v1.35.4", the lab asks Kubernetes 1.36 (ONEPOOL_LAB_KUBE=1.36): rebuild it with ` + "`make tools KUBE=1.36`"},
		{name: "a look-alike minor", body: `{"gitVersion":"v1.361.0"}`, wantErr: "the lab asks Kubernetes 1.36"},
		{name: "no version built in", body: `{"gitVersion":"v0.0.0-master+$Format:%H$"}`, wantErr: "the lab asks Kubernetes 1.36"},
		{name: "not JSON", body: `<html>`, wantErr: "kube-apiserver /version: HTTP 200"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				assert.Equal(t, "/version", r.URL.Path)
				_, _ = w.Write([]byte(tc.body))
			}))
			defer srv.Close()
			err := checkVersion(context.Background(), srv.Client(), srv.URL, r136)
			if tc.wantErr == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, tc.wantErr)
		})
	}
}
