package upstream

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// RabbitMQProgram is the server of Debian's rabbitmq-server package, run
// without the package's wrapper (/usr/sbin/rabbitmq-server), which
// switches to the rabbitmq user and the package's directories.
const RabbitMQProgram = "/usr/lib/rabbitmq/bin/rabbitmq-server"

// RabbitMQ is a RabbitMQ node started by StartRabbitMQ: AMQP and the
// management API on loopback, user guest (RabbitMQ lets guest in from
// loopback only, its loopback_users default).
type RabbitMQ struct {
	// AMQP is the AMQP 0-9-1 URL (amqp://guest:guest@127.0.0.1:<port>/),
	// the host of KEDA's rabbitmq trigger with protocol amqp.
	AMQP string
	// HTTP is the management API's URL (http://guest:guest@127.0.0.1:<port>/),
	// the host of KEDA's rabbitmq trigger with protocol http.
	HTTP string
	// Metrics is the host:port of its Prometheus endpoint (/metrics, the
	// rabbitmq_prometheus plugin, per-object metrics on: one series per
	// queue, such as rabbitmq_queue_messages_ready{queue="…"}), for
	// StartPrometheus.
	Metrics string
	// Dir holds its configuration, data (mnesia), log and Erlang cookie.
	Dir  string
	mgmt string
}

// StartRabbitMQ runs a RabbitMQ node of its own (node name, Erlang port
// mapper, distribution port, data and log directories all private to the
// test) with the management and Prometheus plugins, and returns once the management API
// answers (at most 3 minutes; Erlang and the plugin take 10–30 s on a busy
// machine). It stops the node and its port mapper with t.Cleanup. Without
// the Debian package it marks t Unavailable.
func StartRabbitMQ(t testing.TB) *RabbitMQ {
	t.Helper()
	if _, err := os.Stat(RabbitMQProgram); err != nil {
		Unavailable(t, fmt.Errorf("rabbitmq-server (Debian package rabbitmq-server; make deps installs it): %w", err))
	}
	epmd := Debian(t, "epmd", "erlang-base")
	// Short: the node's files and sockets live under it.
	work, err := os.MkdirTemp("", "rabbitmq-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(work) })
	amqpPort, mgmtPort, promPort, distPort, epmdPort := freePort(t), freePort(t), freePort(t), freePort(t), freePort(t)
	conf := fmt.Sprintf("listeners.tcp.default = 127.0.0.1:%d\nmanagement.tcp.ip = 127.0.0.1\nmanagement.tcp.port = %d\n"+
		"prometheus.tcp.ip = 127.0.0.1\nprometheus.tcp.port = %d\nprometheus.return_per_object_metrics = true\n", amqpPort, mgmtPort, promPort)
	for name, data := range map[string]string{
		"rabbitmq.conf":   conf,
		"enabled_plugins": "[rabbitmq_management,rabbitmq_prometheus].\n",
		"env.conf":        "",
	} {
		if err := os.WriteFile(filepath.Join(work, name), []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// Our own port mapper in the foreground: the node registers with it
	// (ERL_EPMD_PORT) instead of starting a daemon that outlives the test.
	epmdEnv := []string{"ERL_EPMD_PORT=" + fmt.Sprint(epmdPort)}
	epmdDone := startEnv(t, work, "epmd", epmd, epmdEnv, "-port", fmt.Sprint(epmdPort))
	waitPort(t, "epmd", epmdPort, epmdDone, filepath.Join(work, "epmd.log"))
	node := fmt.Sprintf("rabbit-%d@localhost", amqpPort)
	env := append(epmdEnv,
		"HOME="+work, // the Erlang cookie
		"RABBITMQ_NODENAME="+node,
		"RABBITMQ_CONFIG_FILE="+filepath.Join(work, "rabbitmq.conf"),
		"RABBITMQ_CONF_ENV_FILE="+filepath.Join(work, "env.conf"),
		"RABBITMQ_ENABLED_PLUGINS_FILE="+filepath.Join(work, "enabled_plugins"),
		"RABBITMQ_MNESIA_BASE="+filepath.Join(work, "mnesia"),
		"RABBITMQ_LOG_BASE="+filepath.Join(work, "log"),
		"RABBITMQ_LOGS=-",
		fmt.Sprintf("RABBITMQ_DIST_PORT=%d", distPort),
	)
	done := startEnv(t, work, "rabbitmq", RabbitMQProgram, env)
	r := &RabbitMQ{
		AMQP:    fmt.Sprintf("amqp://guest:guest@127.0.0.1:%d/", amqpPort),
		HTTP:    fmt.Sprintf("http://guest:guest@127.0.0.1:%d/", mgmtPort),
		Metrics: fmt.Sprintf("127.0.0.1:%d", promPort),
		Dir:     work,
		mgmt:    fmt.Sprintf("http://127.0.0.1:%d", mgmtPort),
	}
	log := filepath.Join(work, "rabbitmq.log")
	for deadline := time.Now().Add(3 * time.Minute); ; {
		code, _, err := r.api(http.MethodGet, "/api/overview", nil)
		if err == nil && code == http.StatusOK {
			break
		}
		select {
		case <-done:
			t.Fatalf("rabbitmq exited before it answered:\n%s", logTail(log))
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("rabbitmq's management API not answering after 3 minutes: %d %v\n%s", code, err, logTail(log))
		}
		time.Sleep(250 * time.Millisecond)
	}
	return r
}

// api sends one management API request as guest.
func (r *RabbitMQ) api(method, path string, in any) (int, []byte, error) {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return 0, nil, err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, r.mgmt+path, body)
	if err != nil {
		return 0, nil, err
	}
	req.SetBasicAuth("guest", "guest")
	req.Header.Set("Content-Type", "application/json")
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	return resp.StatusCode, data, err
}

func (r *RabbitMQ) mustAPI(t testing.TB, method, path string, in any) []byte {
	t.Helper()
	code, body, err := r.api(method, path, in)
	if err != nil || code/100 != 2 {
		t.Fatalf("rabbitmq: %s %s: %d %v: %s", method, path, code, err, body)
	}
	return body
}

// DeclareQueue declares a durable queue in the default vhost, failing t
// when RabbitMQ refuses.
func (r *RabbitMQ) DeclareQueue(t testing.TB, queue string) {
	t.Helper()
	r.mustAPI(t, http.MethodPut, "/api/queues/%2F/"+url.PathEscape(queue), map[string]any{"durable": true})
}

// Publish puts n messages on queue through the default exchange, failing
// t unless each is routed.
func (r *RabbitMQ) Publish(t testing.TB, queue string, n int) {
	t.Helper()
	for i := range n {
		body := r.mustAPI(t, http.MethodPost, "/api/exchanges/%2F/amq.default/publish", map[string]any{
			"properties": map[string]any{}, "routing_key": queue, "payload": fmt.Sprintf("job %d", i), "payload_encoding": "string",
		})
		if !strings.Contains(string(body), `"routed":true`) {
			t.Fatalf("rabbitmq: publishing to %s: not routed: %s", queue, body)
		}
	}
}

// Purge removes every message of queue, failing t when RabbitMQ refuses.
func (r *RabbitMQ) Purge(t testing.TB, queue string) {
	t.Helper()
	r.mustAPI(t, http.MethodDelete, "/api/queues/%2F/"+url.PathEscape(queue)+"/contents", nil)
}

// Get takes up to n messages off queue (acknowledged: they are gone) and
// returns how many it took.
func (r *RabbitMQ) Get(t testing.TB, queue string, n int) int {
	t.Helper()
	body := r.mustAPI(t, http.MethodPost, "/api/queues/%2F/"+url.PathEscape(queue)+"/get", map[string]any{
		"count": n, "ackmode": "ack_requeue_false", "encoding": "auto",
	})
	var msgs []json.RawMessage
	if err := json.Unmarshal(body, &msgs); err != nil {
		t.Fatalf("rabbitmq: getting from %s: %v: %s", queue, err, body)
	}
	return len(msgs)
}

// startEnv is start (apiserver.go) with env added to this process's
// environment: the programs of the failover cluster are configured through
// it (RABBITMQ_*, KUBECONFIG, Karpenter's and KEDA's settings).
func startEnv(t testing.TB, dir, name, program string, env []string, args ...string) <-chan struct{} {
	t.Helper()
	logf, err := os.Create(filepath.Join(dir, name+".log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(program, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		t.Fatalf("starting %s: %v", name, err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); logf.Close(); close(done) }() //nolint:errcheck // the exit is the log's story
	t.Cleanup(func() {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM) //nolint:errcheck // it may have exited
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) //nolint:errcheck
			<-done
		}
	})
	return done
}

// waitPort waits (at most a minute) until something listens on the
// loopback port, failing t with the log when the program exits first.
func waitPort(t testing.TB, name string, port int, done <-chan struct{}, log string) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); ; {
		if c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port)); err == nil {
			c.Close()
			return
		}
		select {
		case <-done:
			t.Fatalf("%s exited before it listened:\n%s", name, logTail(log))
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not listening on %d after a minute:\n%s", name, port, logTail(log))
		}
		time.Sleep(100 * time.Millisecond)
	}
}
