package kubenexus

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// writePair writes a self-signed client certificate with Subject CN name, and its key, as PEM files.
func writePair(t *testing.T, certFile, keyFile, name string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	template := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: name},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, template, template, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	if certFile != "" {
		writeFile(t, certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
	}
	if keyFile != "" {
		writeFile(t, keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}))
	}
}

func writeFile(t *testing.T, path string, data []byte) {
	t.Helper()
	// A file replaced as the kubelet replaces a Secret's: written anew, so its modification time moves.
	if err := os.WriteFile(path+".new", data, 0o600); err != nil {
		t.Fatal(err)
	}
	later := time.Now().Add(time.Duration(len(data)) * time.Millisecond)
	if err := os.Chtimes(path+".new", later, later); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(path+".new", path); err != nil {
		t.Fatal(err)
	}
}

func commonName(t *testing.T, certificate *tls.Certificate) string {
	t.Helper()
	parsed, err := x509.ParseCertificate(certificate.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	return parsed.Subject.CommonName
}

func TestClientCertificateFollowsItsFiles(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	writePair(t, certFile, keyFile, "first")
	certificate, err := newClientCertificate(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		name    string
		replace func()
		want    string
	}{
		{name: "unchanged files: the certificate read at start", replace: func() {}, want: "first"},
		{name: "a renewed pair: the new certificate", replace: func() { writePair(t, certFile, keyFile, "second") }, want: "second"},
		{
			name:    "a certificate without its key (half written): the previous pair",
			replace: func() { writePair(t, certFile, "", "third") },
			want:    "second",
		},
		{name: "the key follows: the new pair", replace: func() { writePair(t, certFile, keyFile, "fourth") }, want: "fourth"},
	}
	for _, step := range steps {
		step.replace()
		got, err := certificate.get(nil)
		if err != nil {
			t.Fatalf("%s: %v", step.name, err)
		}
		if name := commonName(t, got); name != step.want {
			t.Errorf("%s: presented %q, want %q", step.name, name, step.want)
		}
	}
}
