// Package wire is the oracles' one protocol: a JSON case per line on stdin, a JSON answer per line on
// stdout, in order, until stdin closes. A case that upstream's code refuses, or that makes it panic, is
// answered with {"error": ...} and the program goes on to the next case.
package wire

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
)

// Answer is one line of output: exactly one of Result and Error is set.
type Answer struct {
	Result any    `json:"result,omitempty"`
	Error  string `json:"error,omitempty"`
}

// Handler judges one case, given as the raw JSON of its line.
type Handler func(line []byte) (any, error)

// Serve answers every line of in on out with handle, one answer per line, flushing after each.
func Serve(in io.Reader, out io.Writer, handle Handler) error {
	reader := bufio.NewReaderSize(in, 1<<20)
	writer := bufio.NewWriter(out)
	encoder := json.NewEncoder(writer)
	encoder.SetEscapeHTML(false)
	for {
		line, err := reader.ReadBytes('\n')
		if len(line) > 0 {
			if encodeErr := encoder.Encode(answer(line, handle)); encodeErr != nil {
				return encodeErr
			}
			if flushErr := writer.Flush(); flushErr != nil {
				return flushErr
			}
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

func answer(line []byte, handle Handler) (result Answer) {
	defer func() {
		if recovered := recover(); recovered != nil {
			result = Answer{Error: fmt.Sprintf("panic: %v", recovered)}
		}
	}()
	value, err := handle(line)
	if err != nil {
		return Answer{Error: err.Error()}
	}
	return Answer{Result: value}
}

// Main serves stdin to stdout and exits non-zero when either breaks.
func Main(handle Handler) {
	if err := Serve(os.Stdin, os.Stdout, handle); err != nil {
		fmt.Fprintln(os.Stderr, "oracle:", err)
		os.Exit(1)
	}
}
