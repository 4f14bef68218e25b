package kubenexus

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"

	placementv1 "kubenexus.io/scheduler/api/placement/v1"
)

// dial opens the (lazy) connection to the placement service that every extension point shares.
func dial(args *Args) (*grpc.ClientConn, placementv1.PlacementClient, error) {
	creds, err := transportCredentials(args)
	if err != nil {
		return nil, nil, err
	}
	conn, err := grpc.NewClient(args.Address, grpc.WithTransportCredentials(creds))
	if err != nil {
		return nil, nil, fmt.Errorf("%s args: address %q: %w", Name, args.Address, err)
	}
	return conn, placementv1.NewPlacementClient(conn), nil
}

func transportCredentials(args *Args) (credentials.TransportCredentials, error) {
	if args.CAFile == "" {
		return insecure.NewCredentials(), nil
	}
	pem, err := os.ReadFile(args.CAFile)
	if err != nil {
		return nil, fmt.Errorf("%s args: caFile: %w", Name, err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s args: caFile %s: no PEM certificate in it", Name, args.CAFile)
	}
	config := &tls.Config{RootCAs: roots, ServerName: args.ServerName, MinVersion: tls.VersionTLS12}
	if args.CertFile != "" {
		certificate, err := newClientCertificate(args.CertFile, args.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("%s args: certFile/keyFile: %w", Name, err)
		}
		config.GetClientCertificate = certificate.get
	}
	return credentials.NewTLS(config), nil
}

// clientCertificate is the client certificate and key, read again at a connection's handshake once either
// file changed (cert-manager renews the Secret, the kubelet swaps the mounted files): gRPC opens connections
// again over a scheduler's life, and each presents the current certificate, not the one read at start. A
// pair that does not load (half written, a key that is not the certificate's) keeps the previous one.
type clientCertificate struct {
	certFile, keyFile string
	mu                sync.Mutex
	stamp             [2]fileStamp
	current           *tls.Certificate
}

type fileStamp struct {
	modified time.Time
	size     int64
}

func newClientCertificate(certFile, keyFile string) (*clientCertificate, error) {
	c := &clientCertificate{certFile: certFile, keyFile: keyFile, stamp: stampsOf(certFile, keyFile)}
	pair, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, err
	}
	c.current = &pair
	return c, nil
}

func (c *clientCertificate) get(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	stamp := stampsOf(c.certFile, c.keyFile)
	if stamp == c.stamp {
		return c.current, nil
	}
	pair, err := tls.LoadX509KeyPair(c.certFile, c.keyFile)
	if err != nil {
		klog.InfoS("client certificate files changed but do not load; keeping the previous ones", "plugin", Name, "err", err)
		return c.current, nil
	}
	c.stamp, c.current = stamp, &pair
	klog.InfoS("client certificate files changed; new connections present the new certificate", "plugin", Name)
	return c.current, nil
}

func stampsOf(certFile, keyFile string) [2]fileStamp {
	var stamps [2]fileStamp
	for i, path := range []string{certFile, keyFile} {
		if info, err := os.Stat(path); err == nil {
			stamps[i] = fileStamp{modified: info.ModTime(), size: info.Size()}
		}
	}
	return stamps
}

// errPodRefused marks the service's refusal of the pod itself (a malformed annotation, an unknown priority
// class): the pod's problem, reported as unschedulable whatever the failure policy.
var errPodRefused = errors.New("refused by the placement service")

// classify tells a refused pod from a service that cannot answer (down, not synced, not the leader, a
// timeout, a bug): only the latter is subject to the failure policy.
func classify(rpc string, err error) error {
	switch status.Code(err) {
	case codes.InvalidArgument, codes.NotFound:
		return fmt.Errorf("%w: %s: %s", errPodRefused, rpc, status.Convert(err).Message())
	default:
		return fmt.Errorf("placement service %s: %s: %s", rpc, status.Code(err), status.Convert(err).Message())
	}
}
