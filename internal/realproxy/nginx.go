package realproxy

import (
	"fmt"
	"math"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"text/template"
	"time"
)

// Zone is one nginx limit_req zone: a leaky bucket per client address
// ($binary_remote_addr) for the requests whose path starts with Location,
// with limit_req's burst and nodelay.
type Zone struct {
	// Location is the prefix location the zone applies to, "/" for every
	// request.
	Location string
	// Rate is the bucket's rate in requests per second, a whole number as
	// nginx takes it.
	Rate int
	// Burst is limit_req's burst: how many requests beyond the rate the
	// bucket admits at once.
	Burst int
}

// Nginx configures an nginx in front of Origin.
type Nginx struct {
	// Origin is the base URL of the server nginx proxies to,
	// "http://127.0.0.1:port".
	Origin string
	// Zones are the limit_req zones, one location each. Paths no zone
	// covers go to the origin unlimited.
	Zones []Zone
	// Status is the status of a refusal (limit_req_status). 0: nginx's
	// default, 503.
	Status int
	// RetryAfter is the Retry-After value a refusal carries, "" for none
	// (nginx's default).
	RetryAfter string
}

func (n Nginx) validate() error {
	u, err := url.Parse(n.Origin)
	if err != nil || u.Scheme != "http" || u.Host == "" {
		return fmt.Errorf("realproxy: Nginx.Origin = %q must be an http URL", n.Origin)
	}
	if len(n.Zones) == 0 {
		return fmt.Errorf("realproxy: Nginx.Zones is empty")
	}
	seen := map[string]bool{}
	for i, z := range n.Zones {
		switch {
		case !strings.HasPrefix(z.Location, "/") || strings.ContainsAny(z.Location, " ;{}\"'\\"):
			return fmt.Errorf("realproxy: Nginx.Zones[%d].Location = %q must be a plain path", i, z.Location)
		case seen[z.Location]:
			return fmt.Errorf("realproxy: Nginx.Zones[%d].Location = %q appears twice", i, z.Location)
		case z.Rate < 1:
			return fmt.Errorf("realproxy: Nginx.Zones[%d].Rate = %d must be at least 1", i, z.Rate)
		case z.Burst < 0:
			return fmt.Errorf("realproxy: Nginx.Zones[%d].Burst = %d must not be negative", i, z.Burst)
		}
		seen[z.Location] = true
	}
	if n.Status != 0 && (n.Status < 400 || n.Status > 599) {
		return fmt.Errorf("realproxy: Nginx.Status = %d must be 0 or an error status (limit_req_status takes 400-599)", n.Status)
	}
	if strings.ContainsAny(n.RetryAfter, " ;{}\"'\\\r\n") {
		return fmt.Errorf("realproxy: Nginx.RetryAfter = %q must be one token", n.RetryAfter)
	}
	return nil
}

// nginxConf is the whole configuration. One worker suffices for a few
// thousand requests per second and leaves the other core to the client and
// the origin. Refusals are logged at info, below the error log's level, so
// that thousands of them cost no disk writes. Retry-After is added through a
// map on $status so that only refusals carry it: add_header with an empty
// value adds nothing, and `always` makes it apply to limit_req's own error
// answers. The upstream keeps connections open, as a production proxy does,
// so that the origin is not the bottleneck.
var nginxConf = template.Must(template.New("nginx.conf").Parse(`worker_processes 1;
pid {{.Dir}}/nginx.pid;
error_log {{.Dir}}/error.log warn;
events { worker_connections 4096; }
http {
    access_log off;
    client_body_temp_path {{.Dir}}/body;
    proxy_temp_path {{.Dir}}/proxy;
    fastcgi_temp_path {{.Dir}}/fastcgi;
    uwsgi_temp_path {{.Dir}}/uwsgi;
    scgi_temp_path {{.Dir}}/scgi;
{{- range $i, $z := .Zones}}
    limit_req_zone $binary_remote_addr zone=z{{$i}}:1m rate={{$z.Rate}}r/s;
{{- end}}
{{- if .Status}}
    limit_req_status {{.Status}};
{{- end}}
    limit_req_log_level info;
    map $status $retry_after {
        default "";
{{- if .RetryAfter}}
        {{.StatusOrDefault}} "{{.RetryAfter}}";
{{- end}}
    }
    upstream origin {
        server {{.OriginHost}};
        keepalive 64;
    }
    server {
        listen 127.0.0.1:{{.Port}};
        proxy_http_version 1.1;
        proxy_set_header Connection "";
        proxy_set_header Host $http_host;
        add_header Retry-After $retry_after always;
{{- range $i, $z := .Zones}}
        location {{$z.Location}} {
            limit_req zone=z{{$i}}{{if $z.Burst}} burst={{$z.Burst}}{{end}} nodelay;
            proxy_pass http://origin;
        }
{{- end}}
{{- if not .HasRoot}}
        location / {
            proxy_pass http://origin;
        }
{{- end}}
    }
}
`))

// StartNginx writes cfg's configuration into a new temporary directory and
// runs nginx on it in the foreground (`nginx -p DIR -e DIR/error.log -c
// DIR/nginx.conf -g 'daemon off;'`) on a free port of 127.0.0.1. It
// returns an error wrapping ErrNotInstalled when nginx is not found, and
// one quoting nginx's log when it does not start.
func StartNginx(cfg Nginx) (*Proxy, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	binary, port, dir, err := prepare("nginx")
	if err != nil {
		return nil, err
	}
	u, _ := url.Parse(cfg.Origin)
	hasRoot := false
	for _, z := range cfg.Zones {
		hasRoot = hasRoot || z.Location == "/"
	}
	status := cfg.Status
	if status == 0 {
		status = 503
	}
	conf := filepath.Join(dir, "nginx.conf")
	if err := writeTemplate(conf, nginxConf, map[string]any{
		"Dir": dir, "Port": port, "OriginHost": u.Host, "Zones": cfg.Zones,
		"Status": cfg.Status, "StatusOrDefault": status, "RetryAfter": cfg.RetryAfter, "HasRoot": hasRoot,
	}); err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	return start("nginx", binary, dir, port,
		"-p", dir+"/", "-e", filepath.Join(dir, "error.log"), "-c", conf, "-g", "daemon off;")
}

func writeTemplate(path string, t *template.Template, data any) error {
	var b strings.Builder
	if err := t.Execute(&b, data); err != nil {
		return fmt.Errorf("realproxy: writing %s: %w", path, err)
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		return fmt.Errorf("realproxy: writing %s: %w", path, err)
	}
	return nil
}

// LimitReqFloor is the least time an nginx limit_req zone with rate and
// burst (nodelay) takes to admit n requests from one client: the first
// request and burst more pass at once, every further one a 1/rate after the
// previous, since each admitted request adds one to an excess that drains
// at rate and may not pass burst (ngx_http_limit_req_lookup).
func LimitReqFloor(n int, rate float64, burst int) time.Duration {
	return time.Duration(math.Max(0, float64(n-burst-1)) / rate * float64(time.Second))
}
