package throttle

import (
	"context"
	"time"
	"weak"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"

	"github.com/kiota-resilience/kiota-resilience-go/observability"
)

// register reports, through mp (nil: the global provider), the pace of
// each budget the queue paces and what the server announced of it. The
// callback holds the queue weakly, so that a provider outliving the queue
// does not keep it, and reads each host under its lock only while a
// reader collects. It returns the first error the meter gives.
func (q *Queue) register(mp metric.MeterProvider) error {
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	m := mp.Meter(observability.ScopeName)
	pace, err := m.Float64ObservableGauge(observability.MetricQueuePace, metric.WithUnit(observability.UnitQueuePace),
		metric.WithDescription("Rate at which the throttle queue releases a paced scope's requests."))
	if err != nil {
		return err
	}
	remaining, err := m.Float64ObservableGauge(observability.MetricQueueBudgetRemaining, metric.WithUnit(observability.UnitQueueBudgetRemaining),
		metric.WithDescription("What the server last announced is left of a scope's budget."))
	if err != nil {
		return err
	}
	limit, err := m.Float64ObservableGauge(observability.MetricQueueBudgetLimit, metric.WithUnit(observability.UnitQueueBudgetLimit),
		metric.WithDescription("The quota per window of the budget the server announced for a scope."))
	if err != nil {
		return err
	}
	self := weak.Make(q)
	_, err = m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		q := self.Value()
		if q == nil {
			return nil
		}
		now := q.clock.Now()
		q.hosts.Range(func(k, v any) bool {
			s := v.(*hostState)
			if !s.active.Load() {
				return true
			}
			s.mu.Lock()
			defer s.mu.Unlock()
			for _, n := range s.nodes {
				name := n.key
				if name == "" {
					name = "/" // the host's own budget
				}
				attrs := metric.WithAttributes(observability.ServerAddressKey.String(k.(string)), observability.QueueScopeKey.String(name))
				if n.budget.live(now, q.recovery) {
					o.ObserveFloat64(remaining, n.budget.budget.Remaining, attrs)
					if n.budget.budget.Limit > 0 {
						o.ObserveFloat64(limit, n.budget.budget.Limit, attrs)
					}
				}
				if r, ok := n.pacer.(interface{ rateAt(time.Time) float64 }); ok && n.paces(now, q.recovery) {
					if rate := r.rateAt(now); rate > 0 {
						o.ObserveFloat64(pace, rate, attrs)
					}
				}
			}
			return true
		})
		return nil
	}, pace, remaining, limit)
	return err
}
