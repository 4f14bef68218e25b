package kubenexus

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	kjson "sigs.k8s.io/json"
)

// Failure policies: what the plugin does when the placement service cannot answer.
const (
	// FailurePolicyFail keeps the pod pending (an Error status: kube-scheduler retries it with backoff).
	FailurePolicyFail = "Fail"
	// FailurePolicyIgnore lets the other plugins decide alone while the service is down.
	FailurePolicyIgnore = "Ignore"
)

const (
	defaultTimeout       = 5 * time.Second
	maxTimeout           = time.Minute
	defaultPermitTimeout = 60 * time.Second
	maxPermitTimeout     = 15 * time.Minute // the framework's own cap on a Permit wait
)

// Args are the plugin's arguments in a KubeSchedulerConfiguration profile (pluginConfig[].args).
type Args struct {
	// Address of the placement service's gRPC endpoint: host:port, or unix:///path/to/socket.
	Address string `json:"address"`
	// CAFile verifies the service's certificate; set, the connection uses TLS. Unset: plaintext.
	CAFile string `json:"caFile,omitempty"`
	// CertFile and KeyFile: the client certificate, for a service that requires mutual TLS.
	CertFile string `json:"certFile,omitempty"`
	KeyFile  string `json:"keyFile,omitempty"`
	// ServerName overrides the name the service's certificate is checked against.
	ServerName string `json:"serverName,omitempty"`
	// Timeout of one call to the service (default 5s, at most 1m).
	Timeout metav1.Duration `json:"timeout,omitempty"`
	// FailurePolicy: Fail (default) or Ignore.
	FailurePolicy string `json:"failurePolicy,omitempty"`
	// PermitTimeout: how long a gang member waits at Permit for its group (default 60s, at most 15m); a
	// group's own scheduleTimeoutSeconds, when the service reports one, is not exceeded.
	PermitTimeout metav1.Duration `json:"permitTimeout,omitempty"`
}

// DecodeArgs reads the plugin's args as kube-scheduler hands them over (runtime.Unknown holding the YAML's
// JSON form), strictly: an unknown or miscased field is an error, so that a typo is not silently ignored. Defaults are
// applied and the result is validated.
func DecodeArgs(obj runtime.Object) (*Args, error) {
	args := &Args{}
	switch value := obj.(type) {
	case nil:
	case *runtime.Unknown:
		if len(bytes.TrimSpace(value.Raw)) > 0 {
			// Case-sensitive, unknown and duplicate fields refused: as kube-scheduler reads its own config.
			strict, err := kjson.UnmarshalStrict(value.Raw, args, kjson.DisallowDuplicateFields, kjson.DisallowUnknownFields)
			if err != nil {
				return nil, fmt.Errorf("%s args: %w", Name, err)
			}
			if len(strict) > 0 {
				return nil, fmt.Errorf("%s args: %w", Name, errors.Join(strict...))
			}
		}
	default:
		return nil, fmt.Errorf("%s args: want runtime.Unknown (the profile's pluginConfig args), got %T", Name, obj)
	}
	args.setDefaults()
	if err := args.Validate(); err != nil {
		return nil, err
	}
	return args, nil
}

func (a *Args) setDefaults() {
	if a.Timeout.Duration == 0 {
		a.Timeout.Duration = defaultTimeout
	}
	if a.FailurePolicy == "" {
		a.FailurePolicy = FailurePolicyFail
	}
	if a.PermitTimeout.Duration == 0 {
		a.PermitTimeout.Duration = defaultPermitTimeout
	}
}

// Validate says every problem of the args at once, each naming its field.
func (a *Args) Validate() error {
	var problems []string
	add := func(format string, values ...any) { problems = append(problems, fmt.Sprintf(format, values...)) }
	if strings.TrimSpace(a.Address) == "" {
		add("address: required (host:port or unix:///path of the placement service)")
	}
	if a.Timeout.Duration <= 0 || a.Timeout.Duration > maxTimeout {
		add("timeout: %s is not in (0, %s]", a.Timeout.Duration, maxTimeout)
	}
	if a.PermitTimeout.Duration <= 0 || a.PermitTimeout.Duration > maxPermitTimeout {
		add("permitTimeout: %s is not in (0, %s]", a.PermitTimeout.Duration, maxPermitTimeout)
	}
	if a.FailurePolicy != FailurePolicyFail && a.FailurePolicy != FailurePolicyIgnore {
		add("failurePolicy: %q is not %s or %s", a.FailurePolicy, FailurePolicyFail, FailurePolicyIgnore)
	}
	if (a.CertFile == "") != (a.KeyFile == "") {
		add("certFile and keyFile: both or neither")
	}
	if a.CAFile == "" && (a.CertFile != "" || a.ServerName != "") {
		add("caFile: required with certFile or serverName (they only apply over TLS)")
	}
	for field, path := range map[string]string{"caFile": a.CAFile, "certFile": a.CertFile, "keyFile": a.KeyFile} {
		if path == "" {
			continue
		}
		if _, err := os.Stat(path); err != nil {
			add("%s: %v", field, err)
		}
	}
	if len(problems) == 0 {
		return nil
	}
	sort.Strings(problems)
	return fmt.Errorf("%s args: %s", Name, strings.Join(problems, "; "))
}
