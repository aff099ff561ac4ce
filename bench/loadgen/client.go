package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math/rand"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// A run's shared clock and measured window (nanoseconds since start; 0: not yet).
type window struct {
	t0    time.Time
	start int64
	end   int64
}

func (w *window) now() int64 { return int64(time.Since(w.t0)) }

func (w *window) in(t int64) bool {
	s := atomic.LoadInt64(&w.start)
	e := atomic.LoadInt64(&w.end)
	return s != 0 && t >= s && (e == 0 || t <= e)
}

// client is one simulated player: it authenticates a device, upgrades, says HELLO, sends
// inputs at a rate, and reads every frame, parsing only snapshot headers.
type client struct {
	id   int
	cfg  *config
	to   target // the server it connects to
	win  *window
	http *http.Client

	// Filled while connecting (read after connected is set).
	connectNs int64
	token     string // the session token, once authenticated
	failure   string
	refused   bool // the server was full (ERROR 8 before the HANDSHAKE)
	tickRate  int
	layout    *template
	connected int32 // atomic: 1 once the HANDSHAKE arrived
	closed    int32 // atomic: 1 once the connection ended after it connected
	closeCode int

	lastTick uint64 // atomic: newest snapshot tick, sent back as INPUT's ack_tick

	mu       sync.Mutex
	sent     [256]sentInput
	lastAck  uint64
	acksUs   []int32 // input to acknowledgement, µs, acks inside the window
	snaps    int64   // snapshots inside the window
	bytesIn  int64   // snapshot bytes inside the window
	sentIn   int64   // inputs sent inside the window
	lastSnap int64
	maxGapNs int64 // the longest time between two snapshots inside the window

	conn *wsConn
	stop chan struct{}
}

type sentInput struct {
	seq uint64
	at  int64
}

type authReply struct {
	Token string `json:"token"`
}

// run connects and plays until stop is closed; done is signalled once, at the first outcome
// (connected, failed or refused). A client refused as full (ERROR 8) tries again after the
// retry_after the server asked for, as the SDK does, until it is in or the run ends (with
// -retry=false it gives up).
func (c *client) run(done chan<- *client) {
	reported := false
	for {
		wait, ok := c.attempt()
		if !reported {
			reported = true
			done <- c
		}
		if ok {
			go c.inputs()
			c.readLoop()
			return
		}
		if wait <= 0 || !c.cfg.retry {
			return
		}
		select {
		case <-c.stop:
			return
		case <-time.After(wait):
		}
	}
}

// setOutcome records why the last attempt did not get in (read by the report).
func (c *client) setOutcome(refused bool, format string, a ...interface{}) {
	c.mu.Lock()
	c.refused = refused
	c.failure = fmt.Sprintf(format, a...)
	c.mu.Unlock()
}

// attempt authenticates, upgrades and says HELLO: ok once the HANDSHAKE arrived; when the
// server refused as full, the time it asked to wait before trying again.
func (c *client) attempt() (time.Duration, bool) {
	begin := c.win.now()
	// Authenticated once: a client that tries again after a refusal keeps its token, as the
	// SDK keeps its session.
	if c.token == "" {
		token, err := c.auth()
		if err != nil {
			c.setOutcome(false, "auth: %v", err)
			return 0, false
		}
		c.token = token
	}
	token := c.token
	var src net.Addr
	if c.cfg.ips > 1 {
		src = &net.TCPAddr{IP: net.IPv4(127, 0, 0, byte(1+c.id%c.cfg.ips))}
	}
	ws, err := dialWS(c.to.addr, c.to.host, c.to.path+sep(c.to.path)+"token="+token, src, c.cfg.timeout)
	if err != nil {
		c.setOutcome(false, "upgrade: %v", err)
		return 0, false
	}
	if err := ws.write(2, helloMessage()); err != nil {
		c.setOutcome(false, "hello: %v", err)
		ws.close()
		return 0, false
	}
	ws.c.SetReadDeadline(time.Now().Add(c.cfg.timeout))
	// The HANDSHAKE (templates included) is read whole; a message is at most 64 KiB.
	buf := make([]byte, 65536)
	for {
		f, err := ws.read(buf)
		if err != nil {
			c.setOutcome(false, "handshake: %v", err)
			ws.close()
			return 0, false
		}
		if f.opcode == 8 {
			c.setOutcome(false, "closed %d before HANDSHAKE", closeCode(f.head))
			ws.close()
			return 0, false
		}
		if f.opcode != 2 || len(f.head) == 0 {
			continue
		}
		if f.head[0] == opError {
			code, message := parseError(f.head)
			ws.close()
			// A full server (ERROR 8, close 4008) is counted apart: a refusal, not a failure
			// of the server.
			if code == 8 {
				atomic.AddInt64(&c.cfg.refusals, 1)
				c.setOutcome(true, "ERROR 8 before HANDSHAKE")
				return retryAfter(message), false
			}
			// (The server's reason up to its first colon: failures are counted by that.)
			c.setOutcome(false, "ERROR %d before HANDSHAKE (%s)", code, message)
			return 0, false
		}
		if f.head[0] != opHandshake {
			continue
		}
		h, err := parseHandshake(f.head)
		if err != nil {
			c.setOutcome(false, "handshake: %v", err)
			ws.close()
			return 0, false
		}
		c.tickRate = h.tickRate
		c.layout = h.input
		break
	}
	ws.c.SetReadDeadline(time.Time{})
	c.conn = ws
	c.connectNs = c.win.now() - begin
	atomic.StoreInt32(&c.connected, 1)
	return 0, true
}

// retryAfter is the wait a refusal asks for ("retry_after=N; why"), 5 s when it says none.
func retryAfter(message string) time.Duration {
	var n int
	if _, err := fmt.Sscanf(message, "retry_after=%d;", &n); err != nil || n < 0 {
		n = 5
	}
	return time.Duration(n) * time.Second
}

func sep(path string) string {
	if bytes.IndexByte([]byte(path), '?') >= 0 {
		return "&"
	}
	return "?"
}

func (c *client) auth() (string, error) {
	body := fmt.Sprintf(`{"device_id":"owload-%d-%d"}`, c.cfg.run, c.id)
	resp, err := c.http.Post(c.to.httpBase+"/api/v1/auth/device", "application/json", bytes.NewBufferString(body))
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
	if err != nil {
		return "", err
	}
	if resp.StatusCode != 200 {
		return "", fmt.Errorf("HTTP %d %s", resp.StatusCode, bytes.TrimSpace(data))
	}
	var r authReply
	if err := json.Unmarshal(data, &r); err != nil || r.Token == "" {
		return "", fmt.Errorf("bad auth reply %q", data)
	}
	return r.Token, nil
}

func closeCode(head []byte) int {
	if len(head) >= 2 {
		return int(head[0])<<8 | int(head[1])
	}
	return 1005
}

func (c *client) readLoop() {
	buf := make([]byte, 32)
	for {
		f, err := c.conn.read(buf)
		if err != nil {
			c.ended(1006)
			return
		}
		switch f.opcode {
		case 8:
			c.ended(closeCode(f.head))
			return
		case 9:
			c.conn.write(10, f.head)
		case 2:
			if len(f.head) > 0 && f.head[0] == opSnapshot {
				c.snapshot(f)
			}
		}
	}
}

func (c *client) ended(code int) {
	select {
	case <-c.stop:
		// The run is over: the generator closed it.
	default:
		c.mu.Lock()
		c.closeCode = code
		c.mu.Unlock()
		atomic.StoreInt32(&c.closed, 1)
	}
	c.conn.close()
}

func (c *client) snapshot(f frame) {
	tick, _, ack, err := snapshotHeader(f.head)
	if err != nil {
		return
	}
	atomic.StoreUint64(&c.lastTick, tick)
	now := c.win.now()
	in := c.win.in(now)
	c.mu.Lock()
	if in {
		c.snaps++
		c.bytesIn += int64(f.length)
		if c.lastSnap != 0 && now-c.lastSnap > c.maxGapNs && c.win.in(c.lastSnap) {
			c.maxGapNs = now - c.lastSnap
		}
	}
	c.lastSnap = now
	for s := c.lastAck + 1; s <= ack && ack > c.lastAck; s++ {
		e := c.sent[s%256]
		if e.seq == s && in && c.win.in(e.at) {
			us := (now - e.at) / 1000
			if us > 1<<31-1 {
				us = 1<<31 - 1
			}
			c.acksUs = append(c.acksUs, int32(us))
		}
	}
	if ack > c.lastAck {
		c.lastAck = ack
	}
	c.mu.Unlock()
}

// inputs sends INPUT at the configured rate (starting at a random phase) and a PING every 15 s.
func (c *client) inputs() {
	rng := rand.New(rand.NewSource(int64(c.id)*7919 + 1))
	payload := randomPayload(c.layout, rng)
	var seq uint64
	nextPing := time.Now().Add(15 * time.Second)
	if c.cfg.inputHz == 0 {
		for {
			select {
			case <-c.stop:
				return
			case <-time.After(15 * time.Second):
				c.conn.write(2, pingMessage(uint64(time.Now().UnixMilli())))
			}
		}
	}
	period := time.Second / time.Duration(c.cfg.inputHz)
	select {
	case <-time.After(time.Duration(rng.Int63n(int64(period)))):
	case <-c.stop:
		return
	}
	t := time.NewTicker(period)
	defer t.Stop()
	start := time.Now()
	// The swing's two inputs, made once.
	east, west := swingPayload(c.layout, 1), swingPayload(c.layout, -1)
	for {
		select {
		case <-c.stop:
			return
		case <-t.C:
		}
		if atomic.LoadInt32(&c.closed) == 1 {
			return
		}
		// A random walk: a new direction one time in ten, as the Elixir bots do; or a swing.
		if c.cfg.swing > 0 {
			payload = west
			if swingSign(time.Since(start), c.cfg.swing) > 0 {
				payload = east
			}
		} else if rng.Intn(10) == 0 {
			payload = randomPayload(c.layout, rng)
		}
		seq++
		now := c.win.now()
		c.mu.Lock()
		c.sent[seq%256] = sentInput{seq: seq, at: now}
		if c.win.in(now) {
			c.sentIn++
		}
		c.mu.Unlock()
		if err := c.conn.write(2, inputMessage(seq, atomic.LoadUint64(&c.lastTick), payload)); err != nil {
			return
		}
		if time.Now().After(nextPing) {
			nextPing = time.Now().Add(15 * time.Second)
			c.conn.write(2, pingMessage(uint64(time.Now().UnixMilli())))
		}
	}
}
