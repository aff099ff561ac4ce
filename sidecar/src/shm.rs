//! The shared segment of the zone's protocol (docs/sidecar.md, "The shared segment
//! (`transport` 1)"): a file the zone creates in `/dev/shm`, sizes and writes the header of;
//! the sidecar maps it (`MAP_SHARED`) and never resizes it (but for the `shrink` and `grow`
//! faults).
//!
//! ```text
//! 0     header, 64 bytes: "OWSS" u32 version=1 u64 stripes u64 request_bytes u64 answer_bytes u64 total_bytes, zeros
//! 64    stripe 0: request region (request_bytes), then answer region (answer_bytes)
//! 64 + (request_bytes + answer_bytes)·s   stripe s ...
//! ```
//!
//! Each region starts with a 64-byte header `seq tick n q bytes 0 0 0` (little-endian), then its
//! records, and is written under a sequence lock: the writer stores `seq + 1` (odd), a release
//! fence, the other words, a release fence, then `seq + 2`; the reader loads `seq` (acquire),
//! copies, an acquire fence, loads `seq` again, and keeps the copy only when both loads are the
//! announced (even) `seq`. Every word is accessed as an [`AtomicU64`] on the mapping (8-byte
//! aligned: the mapping is page-aligned, the regions multiples of 64 bytes), so the other
//! process's concurrent writes are never a data race on this side.
//!
//! The file's size is checked (`fstat`) before each access: a file shrunk under the mapping
//! would make an access past its end a `SIGBUS`. (The check and the access are not atomic: a
//! zone that truncates the file while the sidecar copies a region can still crash it; a zone
//! never does.)

use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::os::unix::io::AsRawFd;
use std::path::Path;
use std::sync::atomic::{fence, AtomicU64, Ordering};

/// The segment header's magic.
pub const MAGIC: &[u8; 4] = b"OWSS";
/// The segment header's version.
pub const VERSION: u32 = 1;
/// The size of the segment header and of each region header.
pub const HEADER_BYTES: usize = 64;

/// A request region's header as copied out under its sequence lock (its `seq` is the one
/// announced): its other words.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RegionHeader {
    pub tick: i64,
    pub n: i64,
    pub q: i64,
    pub bytes: i64,
}

/// How an answer region is written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Publish {
    /// The whole sequence lock: odd, the words, even.
    Complete,
    /// The `half` fault: odd, the words, and the region left odd.
    LeaveOdd,
}

/// The shared segment, mapped read-write for the life of the process.
pub struct Segment {
    file: File,
    base: *mut u8,
    /// The mapped length: the header's `total_bytes`.
    total: usize,
    /// The header's `stripes`.
    pub stripes: usize,
    /// The header's `request_bytes`.
    pub request_bytes: usize,
    /// The header's `answer_bytes`.
    pub answer_bytes: usize,
}

// The mapping is only accessed through atomics (see the module's documentation).
unsafe impl Send for Segment {}
unsafe impl Sync for Segment {}

impl Segment {
    /// Opens and maps the segment at `path`, checking its header: the magic, the version,
    /// `stripes` equal to `stripes`, `request_bytes` and `answer_bytes` non-zero multiples of 64
    /// and `total_bytes = 64 + stripes · (request_bytes + answer_bytes)`, the file's size.
    pub fn open(path: &Path, stripes: usize) -> Result<Segment, String> {
        let what = path.display();
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .map_err(|e| format!("the shared segment {what}: {e}"))?;
        let size = file
            .metadata()
            .map_err(|e| format!("the shared segment {what}: {e}"))?
            .len();
        let mut header = [0u8; HEADER_BYTES];
        if size < HEADER_BYTES as u64 {
            return Err(format!(
                "the shared segment {what} is {size} bytes, shorter than its header"
            ));
        }
        file.read_exact_at(&mut header, 0)
            .map_err(|e| format!("the shared segment {what}: {e}"))?;
        let word = |at: usize| u64::from_le_bytes(header[at..at + 8].try_into().unwrap());
        if &header[0..4] != MAGIC {
            return Err(format!(
                "the shared segment {what}: magic {:?}, not \"OWSS\"",
                String::from_utf8_lossy(&header[0..4])
            ));
        }
        let version = u32::from_le_bytes(header[4..8].try_into().unwrap());
        if version != VERSION {
            return Err(format!(
                "the shared segment {what}: version {version}, not {VERSION}"
            ));
        }
        let (n, request_bytes, answer_bytes, total) = (word(8), word(16), word(24), word(32));
        if n != stripes as u64 {
            return Err(format!(
                "the shared segment {what} has {n} stripes, not {stripes}"
            ));
        }
        for (name, v) in [
            ("request_bytes", request_bytes),
            ("answer_bytes", answer_bytes),
        ] {
            if v == 0 || v % 64 != 0 {
                return Err(format!(
                    "the shared segment {what}: {name} {v} is not a positive multiple of 64"
                ));
            }
        }
        let expected = request_bytes
            .checked_add(answer_bytes)
            .and_then(|per| per.checked_mul(n))
            .and_then(|all| all.checked_add(HEADER_BYTES as u64));
        if expected != Some(total) || total != size {
            return Err(format!(
                "the shared segment {what}: total_bytes {total} for {n} stripes of \
                 {request_bytes} + {answer_bytes} bytes, in a file of {size} bytes"
            ));
        }
        let total = usize::try_from(total)
            .map_err(|_| format!("the shared segment {what} is too large to map"))?;
        // SAFETY: a new shared mapping of the whole file; the result is checked.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                total,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(format!(
                "the shared segment {what}: mmap: {}",
                std::io::Error::last_os_error()
            ));
        }
        Ok(Segment {
            file,
            base: base as *mut u8,
            total,
            stripes,
            request_bytes: request_bytes as usize,
            answer_bytes: answer_bytes as usize,
        })
    }

    /// The header's `total_bytes`: the size the file must keep.
    pub fn total_bytes(&self) -> usize {
        self.total
    }

    /// The file's current size (`fstat`).
    pub fn size(&self) -> Result<u64, String> {
        self.file
            .metadata()
            .map(|m| m.len())
            .map_err(|e| format!("the shared segment: fstat: {e}"))
    }

    /// Resizes the file (the `shrink` and `grow` faults only; the mapping stays as it is).
    pub fn set_size(&self, size: u64) -> Result<(), String> {
        self.file
            .set_len(size)
            .map_err(|e| format!("the shared segment: ftruncate: {e}"))
    }

    /// The offset of stripe `stripe`'s request region.
    fn request_region(&self, stripe: usize) -> usize {
        HEADER_BYTES + stripe * (self.request_bytes + self.answer_bytes)
    }

    /// The offset of stripe `stripe`'s answer region.
    fn answer_region(&self, stripe: usize) -> usize {
        self.request_region(stripe) + self.request_bytes
    }

    /// The word at byte `offset` of the mapping.
    fn word(&self, offset: usize) -> &AtomicU64 {
        assert!(offset % 8 == 0 && offset + 8 <= self.total);
        // SAFETY: inside the mapping (checked), 8-byte aligned (the mapping is page-aligned),
        // and only ever accessed atomically by this process.
        unsafe { AtomicU64::from_ptr(self.base.add(offset) as *mut u64) }
    }

    /// The little-endian `i64` at byte `offset` of the mapping.
    fn load(&self, offset: usize, order: Ordering) -> i64 {
        u64::from_le(self.word(offset).load(order)) as i64
    }

    /// Stores `v` little-endian at byte `offset` of the mapping.
    fn store(&self, offset: usize, v: i64, order: Ordering) {
        self.word(offset).store((v as u64).to_le(), order);
    }

    /// Copies stripe `stripe`'s request region out under its sequence lock: its header, and
    /// `records` bytes of records appended to `out` (cleared first). The copy is good only
    /// when the file is still `total_bytes` long, the region holds the header and the records,
    /// and both loads of `seq` equal `seq`, even; the header's other words are the caller's
    /// to check.
    pub fn read_request(
        &self,
        stripe: usize,
        seq: i64,
        records: usize,
        out: &mut Vec<u8>,
    ) -> Result<RegionHeader, String> {
        out.clear();
        if stripe >= self.stripes {
            return Err(format!("no stripe {stripe} in the shared segment"));
        }
        if seq < 0 || seq % 2 != 0 {
            return Err(format!("an announced seq of {seq}, not even"));
        }
        if records % 8 != 0
            || records
                .checked_add(HEADER_BYTES)
                .is_none_or(|need| need > self.request_bytes)
        {
            return Err(format!(
                "{records} bytes of records in a request region of {} bytes",
                self.request_bytes
            ));
        }
        self.check_size()?;
        let base = self.request_region(stripe);
        let seen = self.load(base, Ordering::Acquire);
        let [tick, n, q, bytes] = [1, 2, 3, 4].map(|k| self.load(base + 8 * k, Ordering::Relaxed));
        out.reserve(records);
        let start = base + HEADER_BYTES;
        for at in (start..start + records).step_by(8) {
            out.extend_from_slice(&self.load(at, Ordering::Relaxed).to_le_bytes());
        }
        fence(Ordering::Acquire);
        let again = self.load(base, Ordering::Relaxed);
        if seen != seq || again != seq {
            out.clear();
            return Err(format!(
                "the request region's seq was {seen} then {again}, not the announced {seq}"
            ));
        }
        Ok(RegionHeader { tick, n, q, bytes })
    }

    /// The `seq` of stripe `stripe`'s answer region now (0 when the region is not inside the
    /// file), for the first answer's sequence.
    pub fn answer_seq(&self, stripe: usize) -> i64 {
        let at = self.answer_region(stripe);
        match self.size() {
            Ok(size) if (at + HEADER_BYTES) as u64 <= size => self.load(at, Ordering::Acquire),
            _ => 0,
        }
    }

    /// The room for records in an answer region.
    pub fn answer_room(&self) -> usize {
        self.answer_bytes - HEADER_BYTES
    }

    /// Writes stripe `stripe`'s answer region under its sequence lock: `seq + 1`, the header
    /// `tick n q bytes 0 0 0` and `records` (at most [`Segment::answer_room`] bytes, a multiple
    /// of 8), then `seq + 2` (unless `publish` leaves it odd). `seq` is the region's last even
    /// `seq` (an odd one is first made even); it becomes the new one. Returns the `seq` to
    /// announce: `seq + 2`, or `seq + 1` when left odd. A region no longer inside the file
    /// (it shrank) is not written, and the `seq` is announced all the same: the zone finds the
    /// file's size wrong.
    pub fn write_answer(
        &self,
        stripe: usize,
        seq: &mut i64,
        (tick, n, q): (i64, i64, i64),
        records: &[u8],
        publish: Publish,
    ) -> i64 {
        assert!(records.len() <= self.answer_room() && records.len() % 8 == 0);
        // (Wrapping: a region the zone filled with a huge seq must not stop the sidecar.)
        if *seq % 2 != 0 {
            *seq = seq.wrapping_add(1);
        }
        let old = *seq;
        let (odd, even) = (old.wrapping_add(1), old.wrapping_add(2));
        *seq = even;
        let announced = match publish {
            Publish::Complete => even,
            Publish::LeaveOdd => odd,
        };
        let base = self.answer_region(stripe);
        let fits = self
            .size()
            .is_ok_and(|size| (base + HEADER_BYTES + records.len()) as u64 <= size);
        if !fits {
            return announced;
        }
        self.store(base, odd, Ordering::Relaxed);
        fence(Ordering::Release);
        let header = [tick, n, q, records.len() as i64, 0, 0, 0];
        for (k, &v) in header.iter().enumerate() {
            self.store(base + 8 * (k + 1), v, Ordering::Relaxed);
        }
        let start = base + HEADER_BYTES;
        for (k, chunk) in records.chunks_exact(8).enumerate() {
            let v = i64::from_le_bytes(chunk.try_into().unwrap());
            self.store(start + 8 * k, v, Ordering::Relaxed);
        }
        fence(Ordering::Release);
        if publish == Publish::Complete {
            self.store(base, even, Ordering::Relaxed);
        }
        announced
    }

    /// An error unless the file is still `total_bytes` long.
    fn check_size(&self) -> Result<(), String> {
        let size = self.size()?;
        if size != self.total as u64 {
            return Err(format!(
                "the shared segment is {size} bytes, not its total_bytes {}",
                self.total
            ));
        }
        Ok(())
    }
}

impl Drop for Segment {
    fn drop(&mut self) {
        // SAFETY: the mapping of `open`, unmapped once.
        unsafe {
            libc::munmap(self.base as *mut libc::c_void, self.total);
        }
    }
}
