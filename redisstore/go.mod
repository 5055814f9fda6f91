module github.com/kiota-resilience/kiota-resilience-go/redisstore

go 1.25

require (
	github.com/redis/go-redis/v9 v9.0.3
	github.com/stretchr/testify v1.12.1
	go.opentelemetry.io/otel v1.37.0
	go.opentelemetry.io/otel/metric v1.37.0
	go.opentelemetry.io/otel/sdk/metric v1.37.0
	go.uber.org/goleak v1.3.0
)

require (
	github.com/microsoft/kiota-abstractions-go v1.9.3 // indirect
	github.com/microsoft/kiota-http-go v1.5.4 // indirect
	github.com/std-uritemplate/std-uritemplate/go/v2 v2.0.3 // indirect
)

require (
	github.com/cespare/xxhash/v2 v2.2.0 // indirect
	github.com/dgryski/go-rendezvous v0.0.0-20200823014737-9f7001d12a5f // indirect
	github.com/go-logr/logr v1.4.3 // indirect
	github.com/go-logr/stdr v1.2.2 // indirect
	github.com/google/uuid v1.6.0 // indirect
	github.com/kiota-resilience/kiota-resilience-go v0.0.0-00010101000000-000000000000
	go.opentelemetry.io/auto/sdk v1.1.0 // indirect
	go.opentelemetry.io/otel/sdk v1.37.0 // indirect
	go.opentelemetry.io/otel/trace v1.37.0 // indirect
	go.yaml.in/yaml/v3 v3.0.5 // indirect
	golang.org/x/sys v0.33.0 // indirect
)

replace github.com/kiota-resilience/kiota-resilience-go => ../
