//! The frames of the zone's protocol, version 1 (docs/sidecar.md, "The zone's protocol"):
//! their payloads, after the `u32` big-endian length that [`read_frame`] reads and
//! [`begin_frame`] / [`end_frame`] write. Inside a payload every number is a little-endian `i64`
//! after a 4-byte magic.
//!
//! ```text
//! hello:   "OWSH" version=1 stripe stripes transport tick_rate W H nav_cell nav_agent nav_max_nodes nb nc
//!                 (x0 y0 x1 y1)*nb (cx cy r)*nc
//! welcome: "OWSA" version=1
//! request: "OWSQ" tick n q  (id x y vx vy r m 0)*n  (tag fx fy tx ty 0 0 0)*q     (socket)
//!          "OWSQ" tick n q seq                                                  (shm)
//! answer:  "OWSR" tick n q  (id x y 0)*n  (tag status k (x y)*k)*q                (socket)
//!          "OWSR" tick n q seq bytes                                            (shm)
//! error:   "OWSE" tick message
//! ```
//!
//! Parsing never panics: a payload too short or too long for its counts, a wrong magic, a
//! negative count, is an error. The padding words of the records (the zeros) are not looked at.

use crate::nav::{Path, PathError, Query};
use crate::physics::{Body, Circle, Rect};
use std::io::{self, Read};

/// The protocol's version.
pub const VERSION: i64 = 1;
/// The largest payload a connection reads (a longer one closes it): 64 MiB.
pub const MAX_PAYLOAD: usize = 64 << 20;
/// The size of a body record and of a query record in a request.
pub const RECORD_BYTES: usize = 64;
/// The size of a result record in an answer.
pub const RESULT_BYTES: usize = 32;
/// The words of a request's socket header: "OWSQ" tick n q.
pub const REQUEST_HEADER_BYTES: usize = 4 + 3 * 8;
/// The length of an shm request: "OWSQ" tick n q seq.
pub const SHM_REQUEST_BYTES: usize = 4 + 4 * 8;

/// A hello, its counts checked against its length (its values are the caller's to check).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hello {
    pub stripe: i64,
    pub stripes: i64,
    pub transport: i64,
    pub tick_rate: i64,
    pub width: i64,
    pub height: i64,
    pub nav_cell: i64,
    pub nav_agent: i64,
    pub nav_max_nodes: i64,
    pub boxes: Vec<Rect>,
    pub circles: Vec<Circle>,
}

/// Why a hello is not accepted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HelloError {
    /// The payload does not parse: the connection is closed without a word.
    Parse(String),
    /// Another version: refused with an error frame.
    Version(i64),
}

/// A stripe's request: its tick, `seq` (shm) and records, parsed into buffers that are reused
/// from tick to tick.
#[derive(Clone, Debug, Default)]
pub struct Request {
    pub tick: i64,
    /// Its records came in the frame although the connection uses the shared segment (they
    /// did not fit the stripe's request region): the answer goes in the frame too.
    pub framed: bool,
    pub bodies: Vec<Body>,
    /// `(tag, (from, to))`, in the request's order.
    pub queries: Vec<(i64, Query)>,
}

/// An shm request's frame: the records are in the segment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ShmRequest {
    pub tick: i64,
    pub n: usize,
    pub q: usize,
    pub seq: i64,
}

/// The little-endian `i64` at byte `at` of `buf` (which must hold it).
#[inline]
fn word(buf: &[u8], at: usize) -> i64 {
    i64::from_le_bytes(buf[at..at + 8].try_into().unwrap())
}

/// The words after a 4-byte magic: `count` of them must be there.
fn header_words(buf: &[u8], magic: &[u8; 4], count: usize) -> Result<(), String> {
    if buf.len() < 4 || &buf[0..4] != magic {
        return Err(format!(
            "a frame whose magic is {:?}, not {:?}",
            String::from_utf8_lossy(&buf[..buf.len().min(4)]),
            String::from_utf8_lossy(magic)
        ));
    }
    if buf.len() < 4 + 8 * count {
        return Err(format!(
            "a {:?} frame of {} bytes, shorter than its header",
            String::from_utf8_lossy(magic),
            buf.len()
        ));
    }
    Ok(())
}

/// A count read from a frame: non-negative, at most `max`.
fn count(v: i64, max: usize, what: &str) -> Result<usize, String> {
    if v < 0 || v as u64 > max as u64 {
        return Err(format!(
            "{what}: a count of {v} in a frame of {max} records"
        ));
    }
    Ok(v as usize)
}

impl Hello {
    /// Reads a hello payload.
    pub fn parse(buf: &[u8]) -> Result<Hello, HelloError> {
        header_words(buf, b"OWSH", 1).map_err(HelloError::Parse)?;
        let version = word(buf, 4);
        if version != VERSION {
            return Err(HelloError::Version(version));
        }
        header_words(buf, b"OWSH", 12).map_err(HelloError::Parse)?;
        let w = |k: usize| word(buf, 4 + 8 * k);
        let rest = buf.len() - 100;
        let nb = count(w(10), rest / 32, "boxes").map_err(HelloError::Parse)?;
        let nc = count(w(11), rest / 24, "circles").map_err(HelloError::Parse)?;
        if nb * 32 + nc * 24 != rest {
            return Err(HelloError::Parse(format!(
                "a hello of {} bytes for {nb} boxes and {nc} circles",
                buf.len()
            )));
        }
        let boxes = (0..nb)
            .map(|i| {
                let at = 100 + 32 * i;
                Rect {
                    x0: word(buf, at),
                    y0: word(buf, at + 8),
                    x1: word(buf, at + 16),
                    y1: word(buf, at + 24),
                }
            })
            .collect();
        let circles = (0..nc)
            .map(|i| {
                let at = 100 + 32 * nb + 24 * i;
                Circle {
                    cx: word(buf, at),
                    cy: word(buf, at + 8),
                    r: word(buf, at + 16),
                }
            })
            .collect();
        Ok(Hello {
            stripe: w(1),
            stripes: w(2),
            transport: w(3),
            tick_rate: w(4),
            width: w(5),
            height: w(6),
            nav_cell: w(7),
            nav_agent: w(8),
            nav_max_nodes: w(9),
            boxes,
            circles,
        })
    }
}

impl Request {
    /// Reads a socket request payload (`"OWSQ" tick n q` and its records) into `self`.
    pub fn parse(&mut self, buf: &[u8]) -> Result<(), String> {
        header_words(buf, b"OWSQ", 3)?;
        let rest = buf.len() - REQUEST_HEADER_BYTES;
        let n = count(word(buf, 12), rest / RECORD_BYTES, "bodies")?;
        let q = count(word(buf, 20), rest / RECORD_BYTES, "queries")?;
        if (n + q) * RECORD_BYTES != rest {
            return Err(format!(
                "a request of {} bytes for {n} bodies and {q} queries",
                buf.len()
            ));
        }
        self.parse_records(word(buf, 4), n, q, &buf[REQUEST_HEADER_BYTES..])
    }

    /// Reads `n` body records then `q` query records (exactly `records`) into `self`.
    pub fn parse_records(
        &mut self,
        tick: i64,
        n: usize,
        q: usize,
        records: &[u8],
    ) -> Result<(), String> {
        if n.checked_add(q)
            .and_then(|k| k.checked_mul(RECORD_BYTES))
            .is_none_or(|len| len != records.len())
        {
            return Err(format!(
                "{} bytes of records for {n} bodies and {q} queries",
                records.len()
            ));
        }
        self.tick = tick;
        self.bodies.clear();
        self.queries.clear();
        let (bodies, queries) = records.split_at(n * RECORD_BYTES);
        self.bodies
            .extend(bodies.chunks_exact(RECORD_BYTES).map(|r| Body {
                id: word(r, 0),
                x: word(r, 8),
                y: word(r, 16),
                vx: word(r, 24),
                vy: word(r, 32),
                r: word(r, 40),
                m: word(r, 48),
            }));
        self.queries
            .extend(queries.chunks_exact(RECORD_BYTES).map(|r| {
                (
                    word(r, 0),
                    ((word(r, 8), word(r, 16)), (word(r, 24), word(r, 32))),
                )
            }));
        Ok(())
    }
}

impl ShmRequest {
    /// Reads an shm request payload (`"OWSQ" tick n q seq`, nothing after).
    pub fn parse(buf: &[u8]) -> Result<ShmRequest, String> {
        header_words(buf, b"OWSQ", 4)?;
        if buf.len() != SHM_REQUEST_BYTES {
            return Err(format!(
                "an shm request of {} bytes, not {SHM_REQUEST_BYTES}",
                buf.len()
            ));
        }
        // A region holds at most isize::MAX bytes: larger counts are refused by the segment.
        let max = usize::MAX / RECORD_BYTES / 2;
        Ok(ShmRequest {
            tick: word(buf, 4),
            n: count(word(buf, 12), max, "bodies")?,
            q: count(word(buf, 20), max, "queries")?,
            seq: word(buf, 28),
        })
    }

    /// The length of its records: `(n + q) · 64` bytes.
    pub fn records(&self) -> usize {
        (self.n + self.q) * RECORD_BYTES
    }
}

/// Reads one frame's payload into `buf` (resized to it): `Ok(false)` at end of file before a
/// frame, an error for a payload above [`MAX_PAYLOAD`] or a frame cut short.
pub fn read_frame(r: &mut impl Read, buf: &mut Vec<u8>) -> io::Result<bool> {
    let mut len = [0u8; 4];
    // The first byte alone tells a clean end of file from a frame cut short.
    loop {
        match r.read(&mut len[..1]) {
            Ok(0) => return Ok(false),
            Ok(_) => break,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
    }
    r.read_exact(&mut len[1..])?;
    let len = u32::from_be_bytes(len) as usize;
    if len > MAX_PAYLOAD {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("a frame of {len} bytes, above 64 MiB"),
        ));
    }
    buf.resize(len, 0);
    r.read_exact(buf)?;
    Ok(true)
}

/// Starts a frame in `out` (cleared): a length to fill in by [`end_frame`], then `magic`.
pub fn begin_frame(out: &mut Vec<u8>, magic: &[u8; 4]) {
    out.clear();
    out.extend_from_slice(&[0; 4]);
    out.extend_from_slice(magic);
}

/// Appends little-endian `i64`s.
#[inline]
pub fn put(out: &mut Vec<u8>, values: &[i64]) {
    for v in values {
        out.extend_from_slice(&v.to_le_bytes());
    }
}

/// A path's status in an answer (and in the test frames' "OWNR"): 0 ok, 1 blocked,
/// 2 unreachable, 3 too far.
pub fn status(path: &Path) -> i64 {
    match path {
        Ok(_) => 0,
        Err(PathError::Blocked) => 1,
        Err(PathError::Unreachable) => 2,
        Err(PathError::TooFar) => 3,
    }
}

/// Appends a path: `status k (x y)*k` (no waypoints unless it is found).
pub fn put_path(out: &mut Vec<u8>, path: &Path) {
    let points: &[(i64, i64)] = path.as_deref().unwrap_or(&[]);
    put(out, &[status(path), points.len() as i64]);
    for &(x, y) in points {
        put(out, &[x, y]);
    }
}

/// Fills in the length of the frame begun in `out`; an error (and `out` unchanged) when the
/// payload is above [`MAX_PAYLOAD`].
pub fn end_frame(out: &mut [u8]) -> Result<(), String> {
    let len = out.len() - 4;
    if len > MAX_PAYLOAD {
        return Err(format!("an answer of {len} bytes, above 64 MiB"));
    }
    out[0..4].copy_from_slice(&(len as u32).to_be_bytes());
    Ok(())
}

/// The welcome frame: `"OWSA" version=1`.
pub fn welcome(out: &mut Vec<u8>) {
    begin_frame(out, b"OWSA");
    put(out, &[VERSION]);
    end_frame(out).unwrap();
}

/// An error frame: `"OWSE" tick message`, the message cut (at a character) to fit 64 MiB.
pub fn error(out: &mut Vec<u8>, tick: i64, message: &str) {
    begin_frame(out, b"OWSE");
    put(out, &[tick]);
    let mut end = message.len().min(MAX_PAYLOAD - 12);
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    out.extend_from_slice(&message.as_bytes()[..end]);
    end_frame(out).unwrap();
}

/// Appends an answer's records: `(id x y 0)` for each result, then `(tag status k (x y)*k)` for
/// each path (`tags` and `paths` in the same order).
pub fn put_records(
    out: &mut Vec<u8>,
    results: &[(i64, i64, i64)],
    tags: impl Iterator<Item = i64>,
    paths: &[Path],
) {
    out.reserve(results.len() * RESULT_BYTES + paths.len() * 24);
    for &(id, x, y) in results {
        put(out, &[id, x, y, 0]);
    }
    for (tag, p) in tags.zip(paths) {
        put(out, &[tag]);
        put_path(out, p);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(magic: &[u8; 4], words: &[i64]) -> Vec<u8> {
        let mut out = magic.to_vec();
        for w in words {
            out.extend_from_slice(&w.to_le_bytes());
        }
        out
    }

    #[test]
    fn hellos() {
        let mut words = vec![1, 0, 2, 0, 30, 10_000, 10_000, 1024, 512, 100, 1, 1];
        words.extend([1, 2, 3, 4, 5, 6, 7]);
        let hello = Hello::parse(&frame(b"OWSH", &words)).unwrap();
        assert_eq!(hello.stripes, 2);
        assert_eq!(hello.nav_max_nodes, 100);
        assert_eq!(
            hello.boxes,
            vec![Rect {
                x0: 1,
                y0: 2,
                x1: 3,
                y1: 4
            }]
        );
        assert_eq!(hello.circles, vec![Circle { cx: 5, cy: 6, r: 7 }]);
        assert_eq!(
            Hello::parse(&frame(b"OWSH", &[2])),
            Err(HelloError::Version(2))
        );
        for bad in [
            frame(b"OWSH", &words[..18]),
            frame(b"OWSX", &words),
            frame(b"OWSH", &[words.clone(), vec![0]].concat()),
            b"OW".to_vec(),
        ] {
            assert!(matches!(Hello::parse(&bad), Err(HelloError::Parse(_))));
        }
        words[10] = -1;
        assert!(matches!(
            Hello::parse(&frame(b"OWSH", &words)),
            Err(HelloError::Parse(_))
        ));
        words[10] = i64::MAX;
        assert!(matches!(
            Hello::parse(&frame(b"OWSH", &words)),
            Err(HelloError::Parse(_))
        ));
    }

    #[test]
    fn requests() {
        let mut words = vec![7, 1, 1];
        words.extend([5, 10, 20, 1, 2, 3, 4, 0]);
        words.extend([9, 1, 2, 3, 4, 0, 0, 0]);
        let mut r = Request::default();
        r.parse(&frame(b"OWSQ", &words)).unwrap();
        assert_eq!(r.tick, 7);
        assert_eq!(
            r.bodies,
            vec![Body {
                id: 5,
                x: 10,
                y: 20,
                vx: 1,
                vy: 2,
                r: 3,
                m: 4
            }]
        );
        assert_eq!(r.queries, vec![(9, ((1, 2), (3, 4)))]);
        for (k, v) in [(1, 2), (2, 2), (1, -1), (2, i64::MAX), (1, i64::MIN)] {
            let mut bad = words.clone();
            bad[k] = v;
            assert!(r.parse(&frame(b"OWSQ", &bad)).is_err());
        }
        assert!(r.parse(&frame(b"OWSQ", &words[..18])).is_err());
        assert!(r.parse(&frame(b"OWSQ", &words[..2])).is_err());
        assert!(r.parse(&frame(b"OWSR", &words)).is_err());
        assert_eq!(
            ShmRequest::parse(&frame(b"OWSQ", &[7, 1, 2, 4])),
            Ok(ShmRequest {
                tick: 7,
                n: 1,
                q: 2,
                seq: 4
            })
        );
        assert!(ShmRequest::parse(&frame(b"OWSQ", &[7, 1, 2])).is_err());
        assert!(ShmRequest::parse(&frame(b"OWSQ", &[7, 1, 2, 4, 0])).is_err());
        assert!(ShmRequest::parse(&frame(b"OWSQ", &[7, -1, 2, 4])).is_err());
    }

    #[test]
    fn frames() {
        let mut buf = Vec::new();
        let mut input: &[u8] = &[0, 0, 0, 2, 9, 8, 0, 0];
        assert!(read_frame(&mut input, &mut buf).unwrap());
        assert_eq!(buf, [9, 8]);
        assert!(read_frame(&mut input, &mut buf).is_err());
        assert!(!read_frame(&mut &[][..], &mut buf).unwrap());
        assert!(read_frame(&mut &[4, 0, 0, 1][..], &mut buf).is_err());
        let mut out = Vec::new();
        error(&mut out, 3, "no");
        assert_eq!(
            out,
            [&[0, 0, 0, 14][..], b"OWSE", &3i64.to_le_bytes(), b"no"].concat()
        );
        welcome(&mut out);
        assert_eq!(
            out,
            [&[0, 0, 0, 12][..], b"OWSA", &1i64.to_le_bytes()].concat()
        );
    }
}
