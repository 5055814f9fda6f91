package options_test

import (
	"math"
	"math/big"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kiota-resilience/kiota-resilience-go/internal/effective"
	"github.com/kiota-resilience/kiota-resilience-go/options"
)

// FuzzValidate builds options from arbitrary field values, typed-nil
// policies included, and checks that Validate never panics, that every
// error names a field and wraps ErrInvalidOption, and that options it
// accepts never yield a negative delay, nor one above the backoff's cap.
func FuzzValidate(f *testing.F) {
	s := int64(time.Second)
	type seed struct {
		maxRetries                                       int
		initial, maxDelay, maxElapsed, timeLimit, attTmo int64
		codes                                            []byte
		policyKind                                       uint8
		policyRetries                                    int
		random                                           float64
		retry                                            int
		elapsed                                          int64
	}
	for _, c := range []seed{
		{},
		{10, 3 * s, 180 * s, 1800 * s, 0, 0, nil, 0, 0, 0.5, 1, 0},
		{-1, 0, 0, 0, 0, 0, nil, 0, 0, 0, 1, 0},
		{0, -1, 0, 0, 0, 0, nil, 0, 0, 0, 1, 0},
		{0, 0, -1, 0, 0, 0, nil, 0, 0, 0, 1, 0},
		{0, 0, 0, -1, 0, 0, nil, 0, 0, 0, 1, 0},
		{0, 0, 0, 0, -1, 0, nil, 0, 0, 0, 1, 0},
		{0, 0, 0, 0, 0, -1, nil, 0, 0, 0, 1, 0},
		{0, 5 * s, 4 * s, 0, 0, 0, nil, 0, 0, 0, 1, 0},
		{0, 0, 0, 0, 0, 0, []byte{0x01, 0xad}, 0, 0, 0, 1, 0},
		{0, 0, 0, 0, 0, 0, []byte{0x00, 0x63}, 0, 0, 0, 1, 0},
		{0, 0, 0, 0, 0, 0, []byte{0x03, 0xe8}, 0, 0, 0, 1, 0},
		{0, 0, 0, 0, 0, 0, nil, 1, -1, 0, 1, 0},
		{0, s, 2 * s, 0, 0, 0, nil, 1, 3, 0.999999, 4, 0},
		{0, math.MaxInt64, math.MaxInt64, 0, 0, 0, nil, 1, 0, 0, math.MaxInt, math.MaxInt64},
		{0, 0, 0, 0, 0, 0, nil, 1, 0, math.NaN(), math.MinInt, 0},
		{0, 0, 0, 0, 0, 0, nil, 1, 0, math.Inf(-1), 0, -1},
		{0, 0, 0, 0, 0, 0, nil, 2, 0, 0, 1, 0},
		{0, 0, 0, 0, 0, 0, nil, 3, 0, 0, 1, 0},
		{0, 0, 0, 0, 0, 0, nil, 4, 0, 0, 1, 0},
	} {
		f.Add(c.maxRetries, c.initial, c.maxDelay, c.maxElapsed, c.timeLimit, c.attTmo, c.codes,
			c.policyKind, c.policyRetries, c.random, c.retry, c.elapsed)
	}
	f.Fuzz(func(t *testing.T, maxRetries int, initial, maxDelay, maxElapsed, timeLimit, attemptTimeout int64,
		codes []byte, policyKind uint8, policyRetries int, random float64, retry int, elapsed int64) {
		o := options.RetryHandlerOptions{
			MaxRetries:       maxRetries,
			InitialDelay:     time.Duration(initial),
			MaxDelay:         time.Duration(maxDelay),
			MaxElapsed:       time.Duration(maxElapsed),
			RetriesTimeLimit: time.Duration(timeLimit),
			AttemptTimeout:   time.Duration(attemptTimeout),
		}
		for i := 0; i+1 < len(codes); i += 2 {
			o.StatusCodes = append(o.StatusCodes, int(codes[i])<<8|int(codes[i+1]))
		}
		switch policyKind % 5 {
		case 1:
			o.Policy = options.Exponential{Retries: policyRetries, InitialDelay: time.Duration(initial),
				MaxDelay: time.Duration(maxDelay), Random: func() float64 { return random }}
		case 2:
			o.Policy = (*options.Exponential)(nil)
		case 3:
			o.Policy = options.PolicyFunc(nil)
		case 4:
			o.Policy = &options.Exponential{Retries: policyRetries, Random: func() float64 { return random }}
		}

		err := o.Validate()
		if err != nil {
			require.ErrorIs(t, err, options.ErrInvalidOption)
			require.Regexp(t, `(RetryHandlerOptions|Exponential)\.[A-Z][A-Za-z]* = `, err.Error(), "the error names no field")
			return
		}
		require.GreaterOrEqual(t, o.InitialDelay, time.Duration(0))
		for _, c := range o.StatusCodes {
			require.True(t, c >= 100 && c <= 999, "status code %d accepted", c)
		}
		limits := effective.LimitsOf(&o)
		require.Positive(t, limits.MaxElapsed)
		require.GreaterOrEqual(t, limits.RetriesTimeLimit, time.Duration(0))

		a := options.Attempt{Retry: retry, Elapsed: time.Duration(elapsed)}
		d, retryOK := effective.Policy(&o).Next(a)
		require.GreaterOrEqual(t, d, time.Duration(0), "negative delay")
		if e, ok := exponential(effective.Policy(&o)); ok && retryOK {
			// The documented schedule, min(MaxDelay, InitialDelay·n²),
			// in exact arithmetic; the jitter takes off at most 20 %.
			initial, capped := e.InitialDelay, e.MaxDelay
			if initial == 0 {
				initial = options.DefaultInitialDelay
			}
			if capped == 0 {
				capped = options.DefaultMaxDelay
			}
			n := big.NewInt(int64(max(retry, 1)))
			sched := new(big.Int).Mul(big.NewInt(int64(initial)), new(big.Int).Mul(n, n))
			if sched.Cmp(big.NewInt(int64(capped))) > 0 {
				sched.SetInt64(int64(capped))
			}
			require.LessOrEqual(t, int64(d), sched.Int64(), "delay above its schedule or MaxDelay")
			require.GreaterOrEqual(t, float64(d), 0.8*float64(sched.Int64())*(1-1e-9)-1, "jitter took off more than 20 %%")
		}
	})
}

func exponential(p options.Policy) (options.Exponential, bool) {
	switch e := p.(type) {
	case options.Exponential:
		return e, true
	case *options.Exponential:
		return *e, e != nil
	}
	return options.Exponential{}, false
}

// TestValidateRejectsNilPolicy pins what FuzzValidate found: a typed-nil
// Policy used to panic in Validate (or later, in Next); it is now an
// invalid option naming its type.
func TestValidateRejectsNilPolicy(t *testing.T) {
	for _, tc := range []struct {
		name   string
		policy options.Policy
		want   string
	}{
		{"nil *Exponential", (*options.Exponential)(nil), "RetryHandlerOptions.Policy = *options.Exponential(nil)"},
		{"nil PolicyFunc", options.PolicyFunc(nil), "RetryHandlerOptions.Policy = options.PolicyFunc(nil)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := options.RetryHandlerOptions{Policy: tc.policy}
			err := o.Validate()
			require.ErrorIs(t, err, options.ErrInvalidOption)
			require.ErrorContains(t, err, tc.want)
		})
	}
	o := options.RetryHandlerOptions{Policy: &options.Exponential{}}
	require.NoError(t, o.Validate(), "a non-nil pointer policy is valid")
}
