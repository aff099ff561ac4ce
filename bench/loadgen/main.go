// owload: a native load generator for Overworld servers (capacity runs).
//
// N WebSocket clients authenticate a device over HTTP, upgrade, say HELLO, send inputs at a
// rate (random values of the zone's input layout, from the HANDSHAKE) and read every frame,
// parsing only a snapshot's header (tick, baseline, input acknowledgement). It reports each
// client's snapshot rate, input-to-acknowledgement latency, the connection times, and its own
// CPU and loop lag, so that a run where the generator itself was starved is flagged rather
// than read as the server's behaviour. See docs/benchmarks.md ("Players per node").
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"runtime"
	"sort"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
)

// A server the clients connect to (-url: one, or several separated by commas; client i uses
// the (i mod n)-th, so the clients spread evenly over the servers).
type target struct {
	addr, host, path, httpBase string
}

type config struct {
	addr, host, path, httpBase string   // the first target's (its status is read around the window)
	targets                    []target // every target
	clients, inputHz, ramp     int
	ips                        int
	warmup, seconds            float64
	timeout                    time.Duration
	run                        int64
	retry                      bool
	swing                      time.Duration // 0: a random walk; else the period of a swing (see swingPayload)
	refusals                   int64         // atomic: connections refused as full, retries included
}

type result struct {
	URL              string          `json:"url"`
	Clients          int             `json:"clients"`
	InputHz          int             `json:"input_hz"`
	Ramp             int             `json:"ramp_per_second"`
	RampSeconds      float64         `json:"ramp_seconds"`
	Seconds          float64         `json:"seconds"`
	TickRate         int             `json:"tick_rate"`
	Connected        int             `json:"connected"`
	Failed           int             `json:"failed"`
	Refused          int             `json:"refused"`
	Refusals         int64           `json:"refusals"`
	Failures         map[string]int  `json:"failures"`
	Closed           int             `json:"closed"`
	CloseCodes       map[string]int  `json:"close_codes"`
	ConnectMs        dist            `json:"connect_ms"`
	SnapshotsPerSec  rates           `json:"snapshots_per_second"`
	BytesPerClient   float64         `json:"bytes_per_second_per_client"`
	MaxGapMs         dist            `json:"max_gap_ms"`
	InputsSent       int64           `json:"inputs_sent"`
	AckMs            dist            `json:"ack_ms"`
	AckTicks         dist            `json:"ack_ticks"`
	Generator        generator       `json:"generator"`
	ServerBefore     json.RawMessage `json:"server_before,omitempty"`
	ServerAfter      json.RawMessage `json:"server_after,omitempty"`
	Silent           []string        `json:"silent"`
	ServerBeforeAtMs float64         `json:"server_before_at_ms"`
	ServerAfterAtMs  float64         `json:"server_after_at_ms"`
}

// rates: the per-client snapshot rates over the window, across the clients connected at its
// start (a client closed during the window counts with what it received).
type rates struct {
	Clients int     `json:"clients"`
	Min     float64 `json:"min"`
	P1      float64 `json:"p1"`
	Median  float64 `json:"median"`
	Mean    float64 `json:"mean"`
}

type generator struct {
	Go          string  `json:"go"`
	Procs       int     `json:"procs"`
	CPUSeconds  float64 `json:"cpu_seconds"`
	CPUShare    float64 `json:"cpu_of_one_core"`
	LagMs       dist    `json:"lag_ms"`
	LagPeriodMs float64 `json:"lag_period_ms"`
	Lagged      bool    `json:"lagged"`
	Why         string  `json:"why,omitempty"`
}

func main() {
	var (
		rawURL  = flag.String("url", "ws://127.0.0.1:4000/ws", "the server's WebSocket URL, or several separated by commas (the clients spread over them in turn; the first one's status is read)")
		clients = flag.Int("clients", 100, "clients to connect (0: none, the server's status is still read around the window)")
		inputHz = flag.Int("input-hz", 10, "inputs per second per client (0: none, a PING every 15 s)")
		ramp    = flag.Int("ramp", 100, "clients started per second")
		warmup  = flag.Float64("warmup", 5, "seconds between the last connection and the window")
		seconds = flag.Float64("seconds", 30, "the measured window, in seconds")
		ips     = flag.Int("ips", 1, "spread clients over source addresses 127.0.0.1..127.0.0.K")
		timeout = flag.Duration("timeout", 30*time.Second, "connect timeout (auth, upgrade, HELLO to HANDSHAKE)")
		procs   = flag.Int("procs", 1, "OS threads running Go code (GOMAXPROCS)")
		jsonOut = flag.String("json", "", "write the result as JSON to this path")
		retry   = flag.Bool("retry", true, "a client refused as full (ERROR 8) tries again after the retry_after it was told, until the run ends")
		swing   = flag.Float64("swing", 0, "instead of a random walk, swing back and forth along the input layout's first field (the goblin world's mx: east, west) with this period in seconds, a quarter of it first (0: a random walk)")
	)
	flag.Parse()
	die := func(format string, a ...interface{}) {
		fmt.Fprintf(os.Stderr, "owload: "+format+"\n", a...)
		os.Exit(2)
	}
	var targets []target
	for _, raw := range strings.Split(*rawURL, ",") {
		u, err := url.Parse(strings.TrimSpace(raw))
		if err != nil || u.Scheme != "ws" || u.Host == "" || u.Port() == "" {
			die("-url must look like ws://127.0.0.1:4000/ws (or several, separated by commas)")
		}
		path := u.EscapedPath()
		if path == "" {
			path = "/ws"
		}
		if u.RawQuery != "" {
			path += "?" + u.RawQuery
		}
		targets = append(targets, target{addr: u.Host, host: u.Host, path: path, httpBase: "http://" + u.Host})
	}
	if *swing < 0 {
		die("-swing must be a period in seconds, or 0")
	}
	if *clients < 0 || *inputHz < 0 || *inputHz > 1000 || *ramp < 1 || *seconds <= 0 || *warmup < 0 || *procs < 1 || *ips < 1 || *ips > 254 {
		die("-ramp, -seconds, -procs and -ips must be positive, -clients at least 0 (0: the server alone, its status read around the window), -input-hz in 0..1000, -warmup at least 0")
	}
	runtime.GOMAXPROCS(*procs)
	first := targets[0]
	cfg := &config{
		addr: first.addr, host: first.host, path: first.path, httpBase: first.httpBase, targets: targets,
		clients: *clients, inputHz: *inputHz, ramp: *ramp, ips: *ips, retry: *retry,
		swing:  time.Duration(*swing * float64(time.Second)),
		warmup: *warmup, seconds: *seconds, timeout: *timeout, run: time.Now().UnixNano(),
	}
	r := run(cfg)
	r.Generator.Procs = *procs
	report(r)
	if *jsonOut != "" {
		data, _ := json.MarshalIndent(r, "", "  ")
		if err := os.WriteFile(*jsonOut, append(data, '\n'), 0o644); err != nil {
			die("cannot write %s: %v", *jsonOut, err)
		}
		fmt.Printf("wrote %s\n", *jsonOut)
	}
}

func cpuSeconds() float64 {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
}

func status(cfg *config, hc *http.Client) json.RawMessage {
	resp, err := hc.Get(cfg.httpBase + "/api/v1/status")
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 1<<22))
	if err != nil || resp.StatusCode != 200 {
		return nil
	}
	return data
}

func run(cfg *config) *result {
	win := &window{t0: time.Now()}
	hc := &http.Client{
		Timeout:   cfg.timeout,
		Transport: &http.Transport{MaxIdleConnsPerHost: 32, IdleConnTimeout: 10 * time.Second},
	}
	stop := make(chan struct{})
	done := make(chan *client, cfg.clients)
	all := make([]*client, cfg.clients)

	// The generator's own loop lag: how late a 10 ms sleep wakes up, during the window.
	const lagPeriod = 10 * time.Millisecond
	var lags []float64
	lagDone := make(chan struct{})
	go func() {
		defer close(lagDone)
		for {
			select {
			case <-stop:
				return
			default:
			}
			t := time.Now()
			time.Sleep(lagPeriod)
			late := time.Since(t) - lagPeriod
			if win.in(win.now()) {
				lags = append(lags, float64(late)/1e6)
			}
		}
	}()

	gap := time.Second / time.Duration(cfg.ramp)
	go func() {
		for i := range all {
			time.Sleep(time.Until(win.t0.Add(time.Duration(i) * gap)))
			c := &client{id: i + 1, cfg: cfg, to: cfg.targets[i%len(cfg.targets)], win: win, http: hc, stop: stop}
			all[i] = c
			go c.run(done)
		}
	}()
	for i := 0; i < cfg.clients; i++ {
		<-done
	}
	rampSeconds := time.Since(win.t0).Seconds()
	time.Sleep(time.Duration(cfg.warmup * float64(time.Second)))

	// The window: server status, CPU, then the same after.
	r := &result{
		URL: "ws://" + cfg.host + cfg.path, Clients: cfg.clients, InputHz: cfg.inputHz,
		Ramp: cfg.ramp, RampSeconds: round2(rampSeconds),
		Failures: map[string]int{}, CloseCodes: map[string]int{}, Silent: []string{},
	}
	var live []*client
	for _, c := range all {
		if atomic.LoadInt32(&c.connected) == 1 && atomic.LoadInt32(&c.closed) == 0 {
			live = append(live, c)
		}
	}
	r.ServerBeforeAtMs = float64(win.now()) / 1e6
	r.ServerBefore = status(cfg, hc)
	cpu0 := cpuSeconds()
	atomic.StoreInt64(&win.start, win.now())
	time.Sleep(time.Duration(cfg.seconds * float64(time.Second)))
	atomic.StoreInt64(&win.end, win.now())
	cpu1 := cpuSeconds()
	r.ServerAfterAtMs = float64(win.now()) / 1e6
	r.ServerAfter = status(cfg, hc)
	close(stop)
	<-lagDone
	secs := float64(win.end-win.start) / 1e9
	r.Seconds = round2(secs)

	var connect, gaps, ackMs, ackTicks, snapRates []float64
	var bytesIn int64
	r.Refusals = atomic.LoadInt64(&cfg.refusals)
	for _, c := range all {
		c.mu.Lock()
		refused, reason := c.refused, c.failure
		c.mu.Unlock()
		if atomic.LoadInt32(&c.connected) == 0 {
			if refused {
				r.Refused++
				continue
			}
			r.Failed++
			if i := strings.Index(reason, ":"); i > 0 {
				reason = reason[:i]
			}
			r.Failures[reason]++
			continue
		}
		r.Connected++
		connect = append(connect, float64(c.connectNs)/1e6)
		if c.conn != nil {
			c.conn.write(8, []byte{0x03, 0xe8})
			c.conn.close()
		}
	}
	for _, c := range live {
		c.mu.Lock()
		if r.TickRate == 0 {
			r.TickRate = c.tickRate
		}
		snapRates = append(snapRates, float64(c.snaps)/secs)
		// (A client connected at the window's start that got no snapshot in it, and was not
		// closed: its device and server, to look it up in the server's logs.)
		if c.snaps == 0 && atomic.LoadInt32(&c.closed) == 0 {
			r.Silent = append(r.Silent, fmt.Sprintf("owload-%d-%d@%s", c.cfg.run, c.id, c.to.addr))
		}
		gaps = append(gaps, float64(c.maxGapNs)/1e6)
		bytesIn += c.bytesIn
		r.InputsSent += c.sentIn
		for _, us := range c.acksUs {
			ackMs = append(ackMs, float64(us)/1000)
		}
		if atomic.LoadInt32(&c.closed) == 1 {
			r.Closed++
			r.CloseCodes[fmt.Sprint(c.closeCode)]++
		}
		c.mu.Unlock()
	}
	r.ConnectMs = summarize(connect)
	r.MaxGapMs = summarize(gaps)
	if r.TickRate > 0 {
		for _, v := range ackMs {
			ackTicks = append(ackTicks, v*float64(r.TickRate)/1000)
		}
	}
	r.AckMs = summarize(ackMs)
	r.AckTicks = summarize(ackTicks)
	if len(live) > 0 {
		r.BytesPerClient = round2(float64(bytesIn) / secs / float64(len(live)))
		sort.Float64s(snapRates)
		sum := 0.0
		for _, v := range snapRates {
			sum += v
		}
		r.SnapshotsPerSec = rates{
			Clients: len(live), Min: round2(snapRates[0]), P1: round2(percentile(snapRates, 1)),
			Median: round2(percentile(snapRates, 50)), Mean: round2(sum / float64(len(snapRates))),
		}
	}
	g := &r.Generator
	g.Go = runtime.Version()
	g.CPUSeconds = round2(cpu1 - cpu0)
	g.CPUShare = round2((cpu1 - cpu0) / secs)
	g.LagPeriodMs = float64(lagPeriod) / 1e6
	g.LagMs = summarize(lags)
	// Flagged when the generator could not keep up: its 10 ms sleeps woke more than 5 ms late
	// at the median or 20 ms at the 99th percentile, or it used nearly all of its threads.
	p99 := g.LagMs.Max
	if g.LagMs.P99 != nil {
		p99 = *g.LagMs.P99
	}
	switch {
	case g.LagMs.P50 > 5 || p99 > 20:
		g.Lagged, g.Why = true, fmt.Sprintf("its loop woke %.1f ms late at the median, %.1f ms at worst", g.LagMs.P50, p99)
	case g.CPUShare > 0.9*float64(runtime.GOMAXPROCS(0)):
		g.Lagged, g.Why = true, fmt.Sprintf("it used %.0f %% of its %d thread(s)", g.CPUShare*100/float64(runtime.GOMAXPROCS(0)), runtime.GOMAXPROCS(0))
	}
	return r
}

func report(r *result) {
	fmt.Printf("owload: %d clients, %d connected, %d failed %v, %d refused as full (%d refusals, retries included; ramp %.1f s), %d closed by the server %v; window %.1f s, %d inputs/s each\n",
		r.Clients, r.Connected, r.Failed, r.Failures, r.Refused, r.Refusals, r.RampSeconds, r.Closed, r.CloseCodes, r.Seconds, r.InputHz)
	fmt.Printf("  connect (auth, upgrade, HELLO to HANDSHAKE): p50 %.1f ms, max %.1f ms (%d)\n", r.ConnectMs.P50, r.ConnectMs.Max, r.ConnectMs.Samples)
	s := r.SnapshotsPerSec
	fmt.Printf("  snapshots/s per client: min %.1f, p1 %.1f, median %.1f, mean %.1f (%d clients); longest gap median %.0f ms, max %.0f ms\n",
		s.Min, s.P1, s.Median, s.Mean, s.Clients, r.MaxGapMs.P50, r.MaxGapMs.Max)
	if len(r.Silent) > 0 {
		fmt.Printf("  connected but no snapshot in the window, not closed: %d %v\n", len(r.Silent), r.Silent)
	}
	fmt.Printf("  input to ack: p50 %.1f ms = %.2f ticks, p99 %s, max %.1f ms (%d acks of %d inputs)\n",
		r.AckMs.P50, r.AckTicks.P50, p99s(r.AckMs, r.AckTicks), r.AckMs.Max, r.AckMs.Samples, r.InputsSent)
	fmt.Printf("  received: %.0f bytes/s per client\n", r.BytesPerClient)
	g := r.Generator
	fmt.Printf("  generator: %.0f %% of one core (%d thread(s)), loop lag p50 %.2f ms, max %.1f ms (%d samples)\n",
		g.CPUShare*100, g.Procs, g.LagMs.P50, g.LagMs.Max, g.LagMs.Samples)
	if g.Lagged {
		fmt.Printf("  WARNING: the generator lagged (%s): its figures are partly its own\n", g.Why)
	}
}

func p99s(ms, ticks dist) string {
	if ms.P99 == nil {
		return "withheld (fewer than 10,000 acks)"
	}
	return fmt.Sprintf("%.1f ms = %.2f ticks", *ms.P99, *ticks.P99)
}
