package service

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
)

// Error is the one JSON object of every error answer: what is wrong and, when one field of the
// request is at fault, its name (a JSON path such as "[3].nodes" for a batch's fourth query).
type Error struct {
	Error string `json:"error"`
	Field string `json:"field,omitempty"`
}

// apiError is an error with its HTTP status and field.
type apiError struct {
	status int
	field  string
	msg    string
}

func (e *apiError) Error() string { return e.msg }

func badRequest(field, format string, args ...any) *apiError {
	return &apiError{status: http.StatusBadRequest, field: field, msg: fmt.Sprintf(format, args...)}
}

// inField prefixes the field of err with prefix ("[3]" in a batch).
func inField(prefix string, err *apiError) *apiError {
	switch {
	case err.field == "":
		err.field = prefix
	case strings.HasPrefix(err.field, "["):
		err.field = prefix + err.field
	default:
		err.field = prefix + "." + err.field
	}
	return err
}

// writeError writes err as the JSON Error object with its status; an error that is not an
// apiError is a 500 whose text stays in the log.
func (s *Server) writeError(w http.ResponseWriter, r *http.Request, err error) {
	var ae *apiError
	if !errors.As(err, &ae) {
		s.logf("%s %s: internal error: %v", r.Method, r.URL.Path, err)
		ae = &apiError{status: http.StatusInternalServerError, msg: "internal error (logged by the server)"}
	}
	writeJSON(w, ae.status, Error{Error: ae.msg, Field: ae.field})
}

// writeJSON writes v as compact JSON and a newline.
func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status, b = http.StatusInternalServerError, []byte(`{"error":"internal error: the answer does not encode"}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}
