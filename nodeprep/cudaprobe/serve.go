package cudaprobe

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/nodeprep/nodeprep/nodeprep/child"
)

// ErrBadRequest is returned for a request that cannot be decoded.
var ErrBadRequest = errors.New("bad CUDA probe request")

// IsRequest reports whether request (JSON) asks for the CUDA probe: its
// "api" is API. The child's entry point (nodeprep/child/serve) sends such
// a request here and every other to the Vulkan and EGL probes.
func IsRequest(request string) bool {
	var r struct {
		API string `json:"api"`
	}
	return json.Unmarshal([]byte(request), &r) == nil && r.API == API
}

// DecodeRequest decodes a request strictly: no unknown fields, nothing
// after it, api API and a library named (dlopen("") would return the
// program itself). Errors wrap ErrBadRequest.
func DecodeRequest(request string) (Request, error) {
	var req Request
	dec := json.NewDecoder(bytes.NewReader([]byte(request)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		return req, fmt.Errorf("%w: %w", ErrBadRequest, err)
	}
	if dec.More() {
		return req, fmt.Errorf("%w: data after the request", ErrBadRequest)
	}
	if req.API != API {
		return req, fmt.Errorf("%w: api %q: want %s", ErrBadRequest, req.API, API)
	}
	if req.Library == "" {
		return req, fmt.Errorf("%w: no library to load", ErrBadRequest)
	}
	return req, nil
}

// Serve runs the request's probe in this process and writes its Report to
// w as one line, prefix then JSON (the in-container probe, whose stdout is
// read; prefix is selftest.ReportPrefix). The error is for a bad request
// (ErrBadRequest) or a failed write.
func Serve(request string, w io.Writer, prefix string) error {
	req, err := DecodeRequest(request)
	if err != nil {
		return err
	}
	return write(w, prefix, Probe(req))
}

// ServeOnPipe is Serve for a child started by nodeprep/child.Run: a fatal
// signal in the driver is first set to be reported with the library it
// happened in (child.InstallCrashReport), and the report goes to the
// private report pipe as "report cuda <JSON>".
func ServeOnPipe(request string, report *os.File) error {
	req, err := DecodeRequest(request)
	if err != nil {
		return err
	}
	if err := child.InstallCrashReport(report); err != nil {
		return err
	}
	return write(report, "report "+API+" ", Probe(req))
}

func write(w io.Writer, prefix string, r *Report) error {
	data, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("encoding the CUDA probe's report: %w", err)
	}
	if _, err := w.Write(append(append([]byte(prefix), data...), '\n')); err != nil {
		return fmt.Errorf("writing the CUDA probe's report: %w", err)
	}
	return nil
}

// Decode decodes a CUDA probe child's report line (the JSON after the
// prefix): one Report, no unknown fields, nothing after it, a library
// named.
func Decode(line []byte) (*Report, error) {
	var r Report
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		return nil, fmt.Errorf("decoding report: %w", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("decoding report: trailing data after the JSON value")
	}
	if r.Library == "" {
		return nil, errors.New("report has no library")
	}
	return &r, nil
}
