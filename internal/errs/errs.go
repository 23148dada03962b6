// Package errs classifies the engine's errors so the C ABI can map each class to a status code and
// Python to an exception type. Code below capi wraps one of the sentinels with context:
//
//	return errs.Invalidf("table %q: id %d out of range [0, %d)", name, id, rows)
//
// and capi asks [Code] which class an error belongs to.
package errs

import (
	"errors"
	"fmt"
	"runtime/debug"
)

// The error classes. Their order fixes the status codes the C ABI returns (see [Code]).
var (
	// ErrInvalid marks bad input: wrong sizes, out-of-range values, malformed specs.
	ErrInvalid = errors.New("invalid input")
	// ErrNotFound marks a lookup of something that does not exist (a feature, a table, a handle).
	ErrNotFound = errors.New("not found")
	// ErrSolver marks a solver failure (infeasible model, time limit with no incumbent, HiGHS error).
	ErrSolver = errors.New("solver failed")
	// ErrIO marks a failure to read or write a file.
	ErrIO = errors.New("i/o failed")
	// ErrCapacity marks a request that does not fit the memory or budget it was given.
	ErrCapacity = errors.New("capacity exceeded")
)

// Status codes returned across the C ABI. 0 is success; Internal covers panics and anything unclassified.
const (
	CodeOK       = 0
	CodeInvalid  = 1
	CodeNotFound = 2
	CodeSolver   = 3
	CodeIO       = 4
	CodeCapacity = 5
	CodeInternal = 99
)

// Code returns the status code for err: 0 for nil, the class's code when err wraps a sentinel, and
// CodeInternal otherwise.
func Code(err error) int {
	switch {
	case err == nil:
		return CodeOK
	case errors.Is(err, ErrInvalid):
		return CodeInvalid
	case errors.Is(err, ErrNotFound):
		return CodeNotFound
	case errors.Is(err, ErrSolver):
		return CodeSolver
	case errors.Is(err, ErrIO):
		return CodeIO
	case errors.Is(err, ErrCapacity):
		return CodeCapacity
	default:
		return CodeInternal
	}
}

// classed is an error with a message of its own that still matches its class with errors.Is.
type classed struct {
	class error
	msg   string
}

func (e *classed) Error() string        { return e.msg }
func (e *classed) Is(target error) bool { return target == e.class }

// New returns an error of class with the formatted message (the class name is not repeated in it).
func New(class error, format string, args ...any) error {
	return &classed{class: class, msg: fmt.Sprintf(format, args...)}
}

// Invalidf returns an ErrInvalid error with the formatted message.
func Invalidf(format string, args ...any) error { return New(ErrInvalid, format, args...) }

// NotFoundf returns an ErrNotFound error with the formatted message.
func NotFoundf(format string, args ...any) error { return New(ErrNotFound, format, args...) }

// Solverf returns an ErrSolver error with the formatted message.
func Solverf(format string, args ...any) error { return New(ErrSolver, format, args...) }

// IOf returns an ErrIO error with the formatted message.
func IOf(format string, args ...any) error { return New(ErrIO, format, args...) }

// Capacityf returns an ErrCapacity error with the formatted message.
func Capacityf(format string, args ...any) error { return New(ErrCapacity, format, args...) }

// Run calls body and returns its error, or, when body panics, an unclassified error (status
// [CodeInternal]) with the panic's value and stack. The C ABI's exports and the engine's own
// goroutines run their work under it: a panic there would otherwise end the process that loaded
// the library.
func Run(body func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("internal error (a bug in recgo, please report it): %v\n%s", r, debug.Stack())
		}
	}()
	return body()
}
