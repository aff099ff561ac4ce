package main

import (
	"encoding/hex"
	"encoding/json"
	"math/rand"
	"os"
	"testing"
	"time"
)

type vectorFile struct {
	Messages []struct {
		Message map[string]interface{} `json:"message"`
		Hex     string                 `json:"hex"`
	} `json:"messages"`
}

func loadVectors(t *testing.T) vectorFile {
	data, err := os.ReadFile("../../protocol/vectors/messages.json")
	if err != nil {
		t.Fatal(err)
	}
	var v vectorFile
	if err := json.Unmarshal(data, &v); err != nil {
		t.Fatal(err)
	}
	return v
}

// The generator reads every HANDSHAKE of the shared vectors as the spec says: tick rate,
// entity, grid, the templates' ids, the input layout and the extensions it skips.
func TestHandshakeVectors(t *testing.T) {
	seen := 0
	for _, c := range loadVectors(t).Messages {
		if c.Message["type"] != "handshake" {
			continue
		}
		seen++
		b, _ := hex.DecodeString(c.Hex)
		h, err := parseHandshake(b)
		if err != nil {
			t.Fatalf("%s: %v", c.Hex, err)
		}
		m := c.Message
		if h.version != int(m["version"].(float64)) || h.tickRate != int(m["tick_rate"].(float64)) ||
			h.entity != uint64(m["entity_id"].(float64)) || h.cols != uint64(m["cols"].(float64)) ||
			h.rows != uint64(m["rows"].(float64)) || h.ext != len(m["extensions"].([]interface{})) {
			t.Fatalf("%s: read %+v", c.Hex, h)
		}
		ids := m["templates"].([]interface{})
		if len(ids) != len(h.ids) {
			t.Fatalf("templates %v, read %v", ids, h.ids)
		}
		for i, id := range ids {
			if int(id.(float64)) != h.ids[i] {
				t.Fatalf("templates %v, read %v", ids, h.ids)
			}
		}
		if m["input"] == nil {
			if h.input != nil {
				t.Fatal("an input layout where the vector has none")
			}
		} else if h.input == nil || h.input.id != int(m["input"].(float64)) {
			t.Fatalf("input layout %v, read %+v", m["input"], h.input)
		}
		// A cut HANDSHAKE is refused, never read past its end.
		for n := 0; n < len(b); n++ {
			if _, err := parseHandshake(b[:n]); err == nil {
				t.Fatalf("a HANDSHAKE cut at %d of %d bytes was accepted", n, len(b))
			}
		}
	}
	if seen < 2 {
		t.Fatalf("%d handshakes in the vectors", seen)
	}
}

// Random inputs over the vectors' input layout (every field type) have the layout's size,
// zero padding and enum indexes below the enum's count, as the server requires.
func TestRandomPayloadFitsTheLayout(t *testing.T) {
	var layout *template
	for _, c := range loadVectors(t).Messages {
		if c.Message["type"] == "handshake" && c.Message["input"] != nil {
			b, _ := hex.DecodeString(c.Hex)
			h, _ := parseHandshake(b)
			layout = h.input
		}
	}
	if layout == nil {
		t.Fatal("no input layout in the vectors")
	}
	bits := 0
	for _, f := range layout.fields {
		bits += f.bits
	}
	rng := rand.New(rand.NewSource(1))
	for i := 0; i < 2000; i++ {
		p := randomPayload(layout, rng)
		if len(p) != (bits+7)/8 {
			t.Fatalf("payload of %d bytes for %d bits", len(p), bits)
		}
		if pad := len(p)*8 - bits; pad > 0 && p[len(p)-1]&(1<<uint(pad)-1) != 0 {
			t.Fatalf("padding not zero: %x", p)
		}
		pos := 0
		for _, f := range layout.fields {
			v := 0
			for k := 0; k < f.bits; k++ {
				v = v<<1 | int(p[pos/8]>>(7-uint(pos%8))&1)
				pos++
			}
			if f.kind == 4 && v >= f.values {
				t.Fatalf("enum index %d of %d values", v, f.values)
			}
		}
	}
	if len(randomPayload(nil, rng)) != 2 {
		t.Fatal("without a layout: two bytes")
	}
}

// INPUT and HELLO as the vectors have them; a SNAPSHOT header read back.
func TestClientMessages(t *testing.T) {
	for _, c := range loadVectors(t).Messages {
		m := c.Message
		switch m["type"] {
		case "input":
			payload, _ := hex.DecodeString(m["payload_hex"].(string))
			got := hex.EncodeToString(inputMessage(uint64(m["seq"].(float64)), uint64(m["ack"].(float64)), payload))
			if got != c.Hex {
				t.Fatalf("INPUT %v: %s, want %s", m, got, c.Hex)
			}
		case "hello":
			if m["token_hex"] == "" && int(m["version"].(float64)) == protocolVersion && hex.EncodeToString(helloMessage()) != c.Hex {
				t.Fatalf("HELLO %x, want %s", helloMessage(), c.Hex)
			}
		case "ping":
			if got := hex.EncodeToString(pingMessage(uint64(m["client_time"].(float64)))); got != c.Hex {
				t.Fatalf("PING %s, want %s", got, c.Hex)
			}
		}
	}
	b := appendVarint(appendVarint(appendVarint([]byte{opSnapshot}, 300), 299), 1<<40)
	tick, base, ack, err := snapshotHeader(append(b, 0, 0))
	if err != nil || tick != 300 || base != 299 || ack != 1<<40 {
		t.Fatalf("snapshot header %d %d %d %v", tick, base, ack, err)
	}
	if _, _, _, err := snapshotHeader(b[:3]); err == nil {
		t.Fatal("a cut header was accepted")
	}
}

func TestErrorMessages(t *testing.T) {
	msg := "retry_after=20; the server is saturated"
	b := appendVarint([]byte{opError, 0, 8}, uint64(len(msg)))
	b = append(b, msg...)
	if code, m := parseError(b); code != 8 || m != msg {
		t.Fatalf("ERROR %d %q", code, m)
	}
	if retryAfter(msg) != 20*time.Second || retryAfter("the zone is full") != 5*time.Second {
		t.Fatal("retry_after misread")
	}
	// Cut short: the code when it is there, never a message past the end.
	if code, m := parseError(b[:5]); code != 8 || m != "" {
		t.Fatalf("cut ERROR %d %q", code, m)
	}
	if code, _ := parseError(b[:2]); code != 0 {
		t.Fatal("a cut code was read")
	}
}

func TestSwing(t *testing.T) {
	p := 12 * time.Second
	// A quarter of the period one way, half the other, a quarter back: around where it began.
	for _, c := range []struct {
		at   time.Duration
		sign int
	}{{0, 1}, {2999 * time.Millisecond, 1}, {3 * time.Second, -1}, {8999 * time.Millisecond, -1}, {9 * time.Second, 1}, {15 * time.Second, -1}} {
		if got := swingSign(c.at, p); got != c.sign {
			t.Errorf("swingSign(%v) = %d, want %d", c.at, got, c.sign)
		}
	}
	// The goblin world's layout: mx, my (int, 8 bits): mx at an end, my at its middle (0).
	layout := &template{fields: []field{{kind: 1, bits: 8}, {kind: 1, bits: 8}}}
	if got := swingPayload(layout, 1); got[0] != 255 || got[1] != 127 {
		t.Errorf("east: %v", got)
	}
	if got := swingPayload(layout, -1); got[0] != 0 || got[1] != 127 {
		t.Errorf("west: %v", got)
	}
	if got := swingPayload(nil, -1); int8(got[0]) != -127 || got[1] != 0 {
		t.Errorf("no layout: %v", got)
	}
}
