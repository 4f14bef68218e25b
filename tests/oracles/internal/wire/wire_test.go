package wire

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

func TestServe(t *testing.T) {
	double := func(line []byte) (any, error) {
		switch text := strings.TrimSpace(string(line)); text {
		case "refuse":
			return nil, errors.New("refused")
		case "panic":
			panic("boom")
		default:
			return text + text, nil
		}
	}
	tests := []struct {
		name string
		in   string
		want string
	}{
		{name: "empty input", in: "", want: ""},
		{name: "one answer per line, in order", in: "a\nb\n", want: "{\"result\":\"aa\"}\n{\"result\":\"bb\"}\n"},
		{name: "last line without newline", in: "a", want: "{\"result\":\"aa\"}\n"},
		{name: "an error answers that case only", in: "refuse\nc\n", want: "{\"error\":\"refused\"}\n{\"result\":\"cc\"}\n"},
		{name: "a panic answers that case only", in: "panic\nd\n", want: "{\"error\":\"panic: boom\"}\n{\"result\":\"dd\"}\n"},
		{name: "no HTML escaping", in: "<&>\n", want: "{\"result\":\"<&><&>\"}\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out bytes.Buffer
			if err := Serve(strings.NewReader(tt.in), &out, double); err != nil {
				t.Fatalf("Serve: %v", err)
			}
			if got := out.String(); got != tt.want {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
}
