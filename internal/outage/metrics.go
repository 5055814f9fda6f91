package outage

import (
	"context"
	"weak"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"

	"github.com/kiota-resilience/kiota-resilience-go/observability"
	"github.com/kiota-resilience/kiota-resilience-go/options"
)

// hostStates are the values MetricHostState reports for every host.
var hostStates = [...]options.HostState{options.HostUp, options.HostDown, options.HostProbing}

// register reports, through mp (nil: the global provider), the state of
// each host the gate keeps: 1 for the state it is in, 0 for the others, so
// that a state left is seen to end. The callback holds the gate weakly, so
// that a provider outliving it does not keep it.
func (hs *Hosts) register(mp metric.MeterProvider) error {
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	m := mp.Meter(observability.ScopeName)
	gauge, err := m.Int64ObservableGauge(observability.MetricHostState, metric.WithUnit(observability.UnitHostState),
		metric.WithDescription("What the retry handler believes of a host that failed: 1 for its state (up, down, probing), 0 for the others."))
	if err != nil {
		return err
	}
	self := weak.Make(hs)
	_, err = m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		hs := self.Value()
		if hs == nil {
			return nil
		}
		hs.hosts.Range(func(k, v any) bool {
			h := v.(*host)
			if !h.failed.Load() {
				return true
			}
			h.mu.Lock()
			state := h.state
			h.mu.Unlock()
			for _, s := range hostStates {
				var n int64
				if s == state {
					n = 1
				}
				o.ObserveInt64(gauge, n, metric.WithAttributes(
					observability.ServerAddressKey.String(k.(string)), observability.HostStateKey.String(s.String())))
			}
			return true
		})
		return nil
	}, gauge)
	return err
}
