package main

// The few parts of the Overworld wire protocol (docs/protocol.md, version 2) a load generator
// needs: HELLO, INPUT and PING to send; HANDSHAKE (tick rate, entity, the input layout) and the
// header of a SNAPSHOT (tick, baseline, input acknowledgement) to read. Everything after a
// snapshot's header is counted, not decoded: the Elixir bots (mix overworld.bots) decode whole
// snapshots; this generator is for capacity runs, where its own CPU must stay small.

import (
	"errors"
	"math/rand"
	"time"
)

const (
	protocolVersion = 2

	opHandshake = 0x01
	opSnapshot  = 0x02
	opEvent     = 0x03
	opPong      = 0x04
	opError     = 0x05

	opHello = 0x40
	opInput = 0x41
	opPing  = 0x43
)

var errShort = errors.New("message ends early")
var errVarint = errors.New("varint longer than 8 bytes")

// reader walks a message's bytes.
type reader struct {
	b   []byte
	pos int
}

func (r *reader) byte() (byte, error) {
	if r.pos >= len(r.b) {
		return 0, errShort
	}
	c := r.b[r.pos]
	r.pos++
	return c, nil
}

func (r *reader) u16() (int, error) {
	if r.pos+2 > len(r.b) {
		return 0, errShort
	}
	v := int(r.b[r.pos])<<8 | int(r.b[r.pos+1])
	r.pos += 2
	return v, nil
}

// varint reads an unsigned LEB128 varint of at most 8 bytes.
func (r *reader) varint() (uint64, error) {
	var v uint64
	for i := 0; i < 8; i++ {
		c, err := r.byte()
		if err != nil {
			return 0, err
		}
		v |= uint64(c&0x7f) << (7 * uint(i))
		if c < 0x80 {
			return v, nil
		}
	}
	return 0, errVarint
}

func (r *reader) skip(n uint64) error {
	if uint64(len(r.b)-r.pos) < n {
		return errShort
	}
	r.pos += int(n)
	return nil
}

func (r *reader) str() error {
	n, err := r.varint()
	if err != nil {
		return err
	}
	return r.skip(n)
}

// text reads a string: a varint length, then its bytes.
func (r *reader) text() (string, error) {
	n, err := r.varint()
	if err != nil {
		return "", err
	}
	if uint64(len(r.b)-r.pos) < n {
		return "", errShort
	}
	s := string(r.b[r.pos : r.pos+int(n)])
	r.pos += int(n)
	return s, nil
}

// parseError reads an ERROR message: its code and message (empty when cut short).
func parseError(head []byte) (int, string) {
	r := &reader{b: head, pos: 1}
	code, err := r.u16()
	if err != nil {
		return 0, ""
	}
	message, _ := r.text()
	return code, message
}

func appendVarint(b []byte, v uint64) []byte {
	for v >= 0x80 {
		b = append(b, byte(v)|0x80)
		v >>= 7
	}
	return append(b, byte(v))
}

// field is one field of a template as far as a generator of inputs needs it.
type field struct {
	kind   byte // 0 uint, 1 int, 2 fixed, 3 angle, 4 enum, 5 bool
	bits   int
	values int // enum: the number of values
}

// template is a template's id and fields.
type template struct {
	id     int
	fields []field
}

// handshake is what a HANDSHAKE tells a load generator.
type handshake struct {
	version  int
	tickRate int
	entity   uint64
	cols     uint64
	rows     uint64
	ids      []int     // the templates' ids, in order
	input    *template // the zone's input layout, nil when it has none
	ext      int       // extensions
}

func parseTemplate(r *reader) (*template, error) {
	id, err := r.byte()
	if err != nil {
		return nil, err
	}
	if err := r.str(); err != nil { // name
		return nil, err
	}
	n, err := r.byte()
	if err != nil {
		return nil, err
	}
	t := &template{id: int(id)}
	for i := 0; i < int(n); i++ {
		if err := r.str(); err != nil {
			return nil, err
		}
		kind, err := r.byte()
		if err != nil {
			return nil, err
		}
		bits, err := r.byte()
		if err != nil {
			return nil, err
		}
		if _, err := r.byte(); err != nil { // diff_bits
			return nil, err
		}
		if _, err := r.varint(); err != nil { // min
			return nil, err
		}
		if _, err := r.varint(); err != nil { // step
			return nil, err
		}
		f := field{kind: kind, bits: int(bits)}
		if kind > 5 || bits < 1 || bits > 53 {
			return nil, errors.New("bad field type or bits")
		}
		if kind == 4 {
			count, err := r.byte()
			if err != nil {
				return nil, err
			}
			f.values = int(count)
			for j := 0; j < int(count); j++ {
				tag, err := r.byte()
				if err != nil {
					return nil, err
				}
				if tag == 0 {
					err = r.str()
				} else {
					_, err = r.varint()
				}
				if err != nil {
					return nil, err
				}
			}
		}
		t.fields = append(t.fields, f)
	}
	return t, nil
}

// parseHandshake reads a HANDSHAKE (opcode included).
func parseHandshake(b []byte) (*handshake, error) {
	r := &reader{b: b}
	if op, err := r.byte(); err != nil || op != opHandshake {
		return nil, errors.New("not a HANDSHAKE")
	}
	h := &handshake{}
	var err error
	if h.version, err = r.u16(); err != nil {
		return nil, err
	}
	if h.tickRate, err = r.u16(); err != nil {
		return nil, err
	}
	if h.entity, err = r.varint(); err != nil {
		return nil, err
	}
	for i := 0; i < 3; i++ { // width, height, cell_size
		if _, err = r.varint(); err != nil {
			return nil, err
		}
	}
	if h.cols, err = r.varint(); err != nil {
		return nil, err
	}
	if h.rows, err = r.varint(); err != nil {
		return nil, err
	}
	n, err := r.byte()
	if err != nil {
		return nil, err
	}
	for i := 0; i < int(n); i++ {
		t, err := parseTemplate(r)
		if err != nil {
			return nil, err
		}
		h.ids = append(h.ids, t.id)
	}
	has, err := r.byte()
	if err != nil {
		return nil, err
	}
	switch has {
	case 0:
	case 1:
		if h.input, err = parseTemplate(r); err != nil {
			return nil, err
		}
	default:
		return nil, errors.New("bad input layout flag")
	}
	exts, err := r.varint()
	if err != nil {
		return nil, err
	}
	for i := uint64(0); i < exts; i++ {
		if _, err := r.varint(); err != nil {
			return nil, err
		}
		if err := r.str(); err != nil {
			return nil, err
		}
	}
	h.ext = int(exts)
	if r.pos != len(b) {
		return nil, errors.New("trailing bytes")
	}
	return h, nil
}

// snapshotHeader reads a SNAPSHOT's tick, baseline and input acknowledgement.
func snapshotHeader(b []byte) (tick, baseline, ack uint64, err error) {
	r := &reader{b: b}
	if op, e := r.byte(); e != nil || op != opSnapshot {
		return 0, 0, 0, errors.New("not a SNAPSHOT")
	}
	if tick, err = r.varint(); err != nil {
		return
	}
	if baseline, err = r.varint(); err != nil {
		return
	}
	ack, err = r.varint()
	return
}

func helloMessage() []byte {
	// The token travels in the upgrade's URL: HELLO carries an empty one.
	return []byte{opHello, 0, protocolVersion, 0}
}

func inputMessage(seq, ack uint64, payload []byte) []byte {
	b := make([]byte, 0, 24+len(payload))
	b = append(b, opInput)
	b = appendVarint(b, seq)
	b = appendVarint(b, ack)
	return append(b, payload...)
}

func pingMessage(ms uint64) []byte {
	return appendVarint([]byte{opPing}, ms)
}

// swingSign is +1 for the first quarter of each period of a swing and its last quarter, -1
// between: a walk back and forth around where it started (a quarter period each side).
func swingSign(elapsed, period time.Duration) int {
	if (elapsed+period/4)%period < period/2 {
		return 1
	}
	return -1
}

// swingPayload makes an input pushing the layout's first field to one end (sign +1: its
// largest quantized value; -1: 0) with every other field at the middle of its range (an enum
// and a bool at 0): the goblin world's stick at full speed east or west. Without a layout, two
// signed bytes (127 or -127, then 0).
func swingPayload(t *template, sign int) []byte {
	if t == nil {
		if sign > 0 {
			return []byte{127, 0}
		}
		return []byte{0x81, 0}
	}
	return pack(t, func(i int, f field) uint64 {
		switch {
		case i == 0 && sign > 0:
			return uint64(1)<<uint(f.bits) - 1
		case i == 0, f.kind == 4, f.kind == 5:
			return 0
		default:
			return uint64(1)<<uint(f.bits-1) - 1
		}
	})
}

// randomPayload makes an input: with a layout, each field a random quantized value (an enum
// index below its count, a bool one bit), most significant bit first and zero padding, as the
// protocol's "Inputs" says; the server clamps numbers to the game's declared range. Without a
// layout, two random signed bytes (what the Elixir bots send then).
func randomPayload(t *template, rng *rand.Rand) []byte {
	if t == nil {
		return []byte{byte(rng.Intn(256)), byte(rng.Intn(256))}
	}
	return pack(t, func(_ int, f field) uint64 {
		switch {
		case f.kind == 4:
			return uint64(rng.Intn(f.values))
		case f.bits >= 63:
			return rng.Uint64()
		default:
			return uint64(rng.Int63n(int64(1) << uint(f.bits)))
		}
	})
}

// pack writes the layout's fields, field i's quantized value given by value(i, field) (called
// in field order), each in its bits, most significant bit first, zero padding to the byte.
func pack(t *template, value func(i int, f field) uint64) []byte {
	total := 0
	for _, f := range t.fields {
		total += f.bits
	}
	out := make([]byte, (total+7)/8)
	pos := 0
	for i, f := range t.fields {
		v := value(i, f)
		for b := f.bits - 1; b >= 0; b-- {
			if v>>uint(b)&1 == 1 {
				out[pos/8] |= 0x80 >> uint(pos%8)
			}
			pos++
		}
	}
	return out
}
