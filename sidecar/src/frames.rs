//! The test frames of docs/sidecar.md ("The test frames"): a scene read from standard input,
//! its answer written to standard output. Every number is a little-endian `i64`, after a 4-byte
//! magic and a `u32` version (1).
//!
//! ```text
//! step in:  "OWPS" u32=1  W H R  nb nc n  (x0 y0 x1 y1)*nb  (cx cy r)*nc  (id x y vx vy r m)*n
//! step out: "OWPR" u32=1  n  (id x y)*n
//! path in:  "OWNS" u32=1  W H cell agent max_nodes  nb nc q  (x0 y0 x1 y1)*nb  (cx cy r)*nc  (fx fy tx ty)*q
//! path out: "OWNR" u32=1  q  (status k (x y)*k)*q
//! ```
//!
//! Decoding checks the ranges of the specification: a frame out of range, or one that does not
//! parse (a short or long frame, a wrong magic or version, a negative count), is an error.

use crate::nav::{self, Nav, Path, PathError, Query};
use crate::physics::{self, Body, Circle, Rect, World};
use crate::wire::{put, put_path};

/// The version of every frame.
pub const VERSION: u32 = 1;

/// A step scene, as read from an "OWPS" frame.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StepInput {
    pub width: i64,
    pub height: i64,
    pub tick_rate: i64,
    pub boxes: Vec<Rect>,
    pub circles: Vec<Circle>,
    pub bodies: Vec<Body>,
}

/// Path queries, as read from an "OWNS" frame.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PathInput {
    pub width: i64,
    pub height: i64,
    pub cell: i64,
    pub agent: i64,
    pub max_nodes: i64,
    pub boxes: Vec<Rect>,
    pub circles: Vec<Circle>,
    pub queries: Vec<Query>,
}

struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn header(buf: &'a [u8], magic: &[u8; 4]) -> Result<Reader<'a>, String> {
        if buf.len() < 8 {
            return Err(format!(
                "a frame of {} bytes, shorter than its header",
                buf.len()
            ));
        }
        if &buf[0..4] != magic {
            return Err(format!(
                "the frame's magic is {:?}, not {:?}",
                String::from_utf8_lossy(&buf[0..4]),
                String::from_utf8_lossy(magic)
            ));
        }
        let version = u32::from_le_bytes(buf[4..8].try_into().unwrap());
        if version != VERSION {
            return Err(format!("frame version {version}, not {VERSION}"));
        }
        Ok(Reader { buf, pos: 8 })
    }

    fn i64(&mut self) -> Result<i64, String> {
        let bytes = self
            .buf
            .get(self.pos..self.pos + 8)
            .ok_or_else(|| format!("the frame ends at byte {} inside a number", self.buf.len()))?;
        self.pos += 8;
        Ok(i64::from_le_bytes(bytes.try_into().unwrap()))
    }

    /// A count, at most the frame's number of words (the records are checked to fit next).
    fn count(&mut self, what: &str) -> Result<usize, String> {
        let n = self.i64()?;
        if n < 0 || n > (self.buf.len() / 8) as i64 {
            return Err(format!(
                "{what}: a count of {n} in a frame of {} bytes",
                self.buf.len()
            ));
        }
        Ok(n as usize)
    }

    fn end(&self) -> Result<(), String> {
        if self.pos != self.buf.len() {
            return Err(format!(
                "{} bytes after the end of the frame",
                self.buf.len() - self.pos
            ));
        }
        Ok(())
    }

    fn obstacles(&mut self, nb: usize, nc: usize) -> Result<(Vec<Rect>, Vec<Circle>), String> {
        let mut boxes = Vec::with_capacity(nb);
        for _ in 0..nb {
            boxes.push(Rect {
                x0: self.i64()?,
                y0: self.i64()?,
                x1: self.i64()?,
                y1: self.i64()?,
            });
        }
        let mut circles = Vec::with_capacity(nc);
        for _ in 0..nc {
            circles.push(Circle {
                cx: self.i64()?,
                cy: self.i64()?,
                r: self.i64()?,
            });
        }
        Ok((boxes, circles))
    }
}

fn header(out: &mut Vec<u8>, magic: &[u8; 4]) {
    out.extend_from_slice(magic);
    out.extend_from_slice(&VERSION.to_le_bytes());
}

fn put_obstacles(out: &mut Vec<u8>, boxes: &[Rect], circles: &[Circle]) {
    for b in boxes {
        put(out, &[b.x0, b.y0, b.x1, b.y1]);
    }
    for c in circles {
        put(out, &[c.cx, c.cy, c.r]);
    }
}

impl StepInput {
    /// Reads an "OWPS" frame and checks it against the ranges of the specification.
    pub fn decode(buf: &[u8]) -> Result<StepInput, String> {
        let mut r = Reader::header(buf, b"OWPS")?;
        let (width, height, tick_rate) = (r.i64()?, r.i64()?, r.i64()?);
        // (The counts are at most the frame's words: these sums do not overflow.)
        let nb = r.count("boxes")?;
        let nc = r.count("circles")?;
        let n = r.count("bodies")?;
        if (nb * 4 + nc * 3 + n * 7) * 8 != buf.len() - r.pos {
            return Err(format!(
                "a frame of {} bytes for {nb} boxes, {nc} circles and {n} bodies",
                buf.len()
            ));
        }
        let (boxes, circles) = r.obstacles(nb, nc)?;
        let mut bodies = Vec::with_capacity(n);
        for _ in 0..n {
            bodies.push(Body {
                id: r.i64()?,
                x: r.i64()?,
                y: r.i64()?,
                vx: r.i64()?,
                vy: r.i64()?,
                r: r.i64()?,
                m: r.i64()?,
            });
        }
        r.end()?;
        let input = StepInput {
            width,
            height,
            tick_rate,
            boxes,
            circles,
            bodies,
        };
        World::check(width, height, &input.boxes, &input.circles)?;
        physics::check(&input.bodies, tick_rate)?;
        Ok(input)
    }

    /// The world of the scene (checked).
    pub fn world(&self) -> Result<World, String> {
        World::new(
            self.width,
            self.height,
            self.boxes.clone(),
            self.circles.clone(),
        )
    }

    /// The "OWPS" frame of the scene (not checked: tests write bad ones too).
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        header(&mut out, b"OWPS");
        put(&mut out, &[self.width, self.height, self.tick_rate]);
        put(
            &mut out,
            &[
                self.boxes.len() as i64,
                self.circles.len() as i64,
                self.bodies.len() as i64,
            ],
        );
        put_obstacles(&mut out, &self.boxes, &self.circles);
        for b in &self.bodies {
            put(&mut out, &[b.id, b.x, b.y, b.vx, b.vy, b.r, b.m]);
        }
        out
    }
}

/// The "OWPR" answer to a step.
pub fn encode_step_answer(positions: &[(i64, i64, i64)]) -> Vec<u8> {
    let mut out = Vec::with_capacity(16 + positions.len() * 24);
    header(&mut out, b"OWPR");
    put(&mut out, &[positions.len() as i64]);
    for &(id, x, y) in positions {
        put(&mut out, &[id, x, y]);
    }
    out
}

/// Reads an "OWPR" answer.
pub fn decode_step_answer(buf: &[u8]) -> Result<Vec<(i64, i64, i64)>, String> {
    let mut r = Reader::header(buf, b"OWPR")?;
    let n = r.count("positions")?;
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        out.push((r.i64()?, r.i64()?, r.i64()?));
    }
    r.end()?;
    Ok(out)
}

impl PathInput {
    /// Reads an "OWNS" frame and checks it against the ranges of the specification (the
    /// query points are coordinates: 0..2^40).
    pub fn decode(buf: &[u8]) -> Result<PathInput, String> {
        let mut r = Reader::header(buf, b"OWNS")?;
        let (width, height) = (r.i64()?, r.i64()?);
        let (cell, agent, max_nodes) = (r.i64()?, r.i64()?, r.i64()?);
        let nb = r.count("boxes")?;
        let nc = r.count("circles")?;
        let q = r.count("queries")?;
        if (nb * 4 + nc * 3 + q * 4) * 8 != buf.len() - r.pos {
            return Err(format!(
                "a frame of {} bytes for {nb} boxes, {nc} circles and {q} queries",
                buf.len()
            ));
        }
        let (boxes, circles) = r.obstacles(nb, nc)?;
        let mut queries = Vec::with_capacity(q);
        for _ in 0..q {
            let query = ((r.i64()?, r.i64()?), (r.i64()?, r.i64()?));
            nav::check_query(&query).map_err(|e| format!("query {e}"))?;
            queries.push(query);
        }
        r.end()?;
        let input = PathInput {
            width,
            height,
            cell,
            agent,
            max_nodes,
            boxes,
            circles,
            queries,
        };
        World::check(width, height, &input.boxes, &input.circles)?;
        Nav::check(width, height, cell, agent, max_nodes)?;
        Ok(input)
    }

    /// The navigation grid of the frame (checked).
    pub fn nav(&self) -> Result<Nav, String> {
        let world = World::new(
            self.width,
            self.height,
            self.boxes.clone(),
            self.circles.clone(),
        )?;
        Nav::new(&world, self.cell, self.agent, self.max_nodes)
    }

    /// The "OWNS" frame of the queries (not checked).
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        header(&mut out, b"OWNS");
        put(
            &mut out,
            &[
                self.width,
                self.height,
                self.cell,
                self.agent,
                self.max_nodes,
            ],
        );
        put(
            &mut out,
            &[
                self.boxes.len() as i64,
                self.circles.len() as i64,
                self.queries.len() as i64,
            ],
        );
        put_obstacles(&mut out, &self.boxes, &self.circles);
        for &((fx, fy), (tx, ty)) in &self.queries {
            put(&mut out, &[fx, fy, tx, ty]);
        }
        out
    }
}

/// The "OWNR" answer to path queries.
pub fn encode_path_answer(paths: &[Path]) -> Vec<u8> {
    let mut out = Vec::new();
    header(&mut out, b"OWNR");
    put(&mut out, &[paths.len() as i64]);
    for p in paths {
        put_path(&mut out, p);
    }
    out
}

/// Reads an "OWNR" answer.
pub fn decode_path_answer(buf: &[u8]) -> Result<Vec<Path>, String> {
    let mut r = Reader::header(buf, b"OWNR")?;
    let q = r.count("paths")?;
    let mut out = Vec::with_capacity(q);
    for _ in 0..q {
        let status = r.i64()?;
        let k = r.count("waypoints")?;
        let mut points = Vec::with_capacity(k);
        for _ in 0..k {
            points.push((r.i64()?, r.i64()?));
        }
        out.push(match (status, k) {
            (0, _) => Ok(points),
            (1, 0) => Err(PathError::Blocked),
            (2, 0) => Err(PathError::Unreachable),
            (3, 0) => Err(PathError::TooFar),
            _ => return Err(format!("a path of status {status} with {k} waypoints")),
        });
    }
    r.end()?;
    Ok(out)
}
