package pki

import (
	"testing"

	"k8s.io/client-go/tools/clientcmd"
)

// Every kubeconfig the lab writes loads with client-go and says what it was given.
func TestKubeconfigForLoads(t *testing.T) {
	for _, tc := range []struct {
		name, ns string
		creds    [][2]string
	}{
		{"admin", "", [][2]string{{"client-certificate-data", base64Std("crt")}, {"client-key-data", base64Std("key")}}},
		{"onepool-scheduler", "onepool-system", [][2]string{{"token", "tok.en"}}},
	} {
		cfg, err := clientcmd.Load([]byte(KubeconfigFor("https://127.0.0.1:26443", []byte("ca"), tc.name, tc.ns, tc.creds...)))
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		ctx := cfg.Contexts[cfg.CurrentContext]
		if ctx == nil || ctx.AuthInfo != tc.name || ctx.Namespace != tc.ns {
			t.Fatalf("%s: context %+v", tc.name, ctx)
		}
		u := cfg.AuthInfos[tc.name]
		if string(cfg.Clusters["onepool-lab"].CertificateAuthorityData) != "ca" || cfg.Clusters["onepool-lab"].Server != "https://127.0.0.1:26443" {
			t.Fatalf("%s: cluster %+v", tc.name, cfg.Clusters["onepool-lab"])
		}
		if tc.ns != "" && u.Token != "tok.en" || tc.ns == "" && (string(u.ClientCertificateData) != "crt" || string(u.ClientKeyData) != "key") {
			t.Fatalf("%s: user %+v", tc.name, u)
		}
	}
}
