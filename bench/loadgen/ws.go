package main

// A minimal WebSocket client (RFC 6455) for the load generator: the opening handshake, masked
// binary frames out, frames in with only their first bytes kept.

import (
	"bufio"
	"crypto/rand"
	"crypto/sha1"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"time"
)

const wsGUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"

type wsConn struct {
	c  net.Conn
	br *bufio.Reader
	mu sync.Mutex // writes come from the reader (pongs) and the input loop
	wb []byte
}

// dialWS connects to addr from the local address src (nil: any) and upgrades path.
func dialWS(addr, host, path string, src net.Addr, timeout time.Duration) (*wsConn, error) {
	d := net.Dialer{Timeout: timeout, LocalAddr: src}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	c.SetDeadline(time.Now().Add(timeout))
	var k [16]byte
	rand.Read(k[:])
	key := base64.StdEncoding.EncodeToString(k[:])
	req := "GET " + path + " HTTP/1.1\r\nHost: " + host +
		"\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: " + key +
		"\r\nSec-WebSocket-Version: 13\r\n\r\n"
	if _, err := io.WriteString(c, req); err != nil {
		c.Close()
		return nil, err
	}
	br := bufio.NewReaderSize(c, 16384)
	status, err := br.ReadString('\n')
	if err != nil {
		c.Close()
		return nil, err
	}
	if !strings.HasPrefix(status, "HTTP/1.1 101") {
		c.Close()
		return nil, fmt.Errorf("upgrade refused: %s", strings.TrimSpace(status))
	}
	sum := sha1.Sum([]byte(key + wsGUID))
	want := base64.StdEncoding.EncodeToString(sum[:])
	accepted := false
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			c.Close()
			return nil, err
		}
		line = strings.TrimRight(line, "\r\n")
		if line == "" {
			break
		}
		if i := strings.IndexByte(line, ':'); i > 0 &&
			strings.EqualFold(line[:i], "sec-websocket-accept") &&
			strings.TrimSpace(line[i+1:]) == want {
			accepted = true
		}
	}
	if !accepted {
		c.Close()
		return nil, errors.New("upgrade without a valid Sec-WebSocket-Accept")
	}
	c.SetDeadline(time.Time{})
	return &wsConn{c: c, br: br}, nil
}

// write sends one masked frame (opcode 2 binary, 9 ping, 10 pong, 8 close).
func (w *wsConn) write(opcode byte, payload []byte) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	b := w.wb[:0]
	b = append(b, 0x80|opcode)
	n := len(payload)
	switch {
	case n < 126:
		b = append(b, 0x80|byte(n))
	case n < 65536:
		b = append(b, 0x80|126, byte(n>>8), byte(n))
	default:
		b = append(b, 0x80|127)
		b = binary.BigEndian.AppendUint64(b, uint64(n))
	}
	var m [4]byte
	rand.Read(m[:])
	b = append(b, m[:]...)
	for i, c := range payload {
		b = append(b, c^m[i&3])
	}
	w.wb = b
	_, err := w.c.Write(b)
	return err
}

// frame is one frame read: its opcode, whole length, and up to len(head) first bytes.
type frame struct {
	opcode byte
	fin    bool
	length int
	head   []byte
}

// read reads the next frame, keeping at most len(buf) bytes of its payload in buf and
// discarding the rest.
func (w *wsConn) read(buf []byte) (frame, error) {
	var h [2]byte
	if _, err := io.ReadFull(w.br, h[:]); err != nil {
		return frame{}, err
	}
	if h[1]&0x80 != 0 {
		return frame{}, errors.New("masked frame from the server")
	}
	n := uint64(h[1] & 0x7f)
	switch n {
	case 126:
		var e [2]byte
		if _, err := io.ReadFull(w.br, e[:]); err != nil {
			return frame{}, err
		}
		n = uint64(binary.BigEndian.Uint16(e[:]))
	case 127:
		var e [8]byte
		if _, err := io.ReadFull(w.br, e[:]); err != nil {
			return frame{}, err
		}
		n = binary.BigEndian.Uint64(e[:])
	}
	if n > 1<<30 {
		return frame{}, errors.New("frame too large")
	}
	keep := int(n)
	if keep > len(buf) {
		keep = len(buf)
	}
	if _, err := io.ReadFull(w.br, buf[:keep]); err != nil {
		return frame{}, err
	}
	if rest := int(n) - keep; rest > 0 {
		if _, err := w.br.Discard(rest); err != nil {
			return frame{}, err
		}
	}
	return frame{opcode: h[0] & 0x0f, fin: h[0]&0x80 != 0, length: int(n), head: buf[:keep]}, nil
}

func (w *wsConn) close() { w.c.Close() }
