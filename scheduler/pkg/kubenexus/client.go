package kubenexus

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

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
		pair, err := tls.LoadX509KeyPair(args.CertFile, args.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("%s args: certFile/keyFile: %w", Name, err)
		}
		config.Certificates = []tls.Certificate{pair}
	}
	return credentials.NewTLS(config), nil
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
