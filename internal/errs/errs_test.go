package errs

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestCode(t *testing.T) {
	cases := []struct {
		name string
		err  error
		want int
	}{
		{"nil", nil, CodeOK},
		{"invalid", Invalidf("id %d", 3), CodeInvalid},
		{"wrapped invalid", fmt.Errorf("table %q: %w", "t", Invalidf("bad")), CodeInvalid},
		{"not found", NotFoundf("x"), CodeNotFound},
		{"solver", Solverf("x"), CodeSolver},
		{"io", IOf("x"), CodeIO},
		{"capacity", Capacityf("x"), CodeCapacity},
		{"plain", errors.New("boom"), CodeInternal},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { assert.Equal(t, c.want, Code(c.err)) })
	}
}

func TestMessageKeepsContext(t *testing.T) {
	err := fmt.Errorf("table %q: %w", "ads", Invalidf("id %d out of range", 7))
	assert.Equal(t, `table "ads": id 7 out of range`, err.Error())
	assert.ErrorIs(t, err, ErrInvalid)
	assert.NotErrorIs(t, err, ErrIO)
}

func TestRunTurnsPanicsIntoInternalErrors(t *testing.T) {
	cases := []struct {
		name     string
		body     func() error
		wantCode int
		wantMsg  string
	}{
		{"returns nil", func() error { return nil }, CodeOK, ""},
		{"returns an error", func() error { return Invalidf("bad id") }, CodeInvalid, "bad id"},
		{"panics with a value", func() error { panic("boom") }, CodeInternal, "internal error (a bug in recgo, please report it): boom"},
		{"index out of range", func() error { var s []int; _ = s[3]; return nil }, CodeInternal, "index out of range"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := Run(c.body)
			assert.Equal(t, c.wantCode, Code(err))
			if c.wantMsg != "" {
				assert.Contains(t, err.Error(), c.wantMsg)
			}
			if c.wantCode == CodeInternal {
				assert.Contains(t, err.Error(), "errs_test.go", "the message carries the panic's stack")
			}
		})
	}
}
