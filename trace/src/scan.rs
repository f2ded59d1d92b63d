//! The fastest path: a scanner for the canonical form of a record line, the
//! compact JSON `gpumon record` (and Python's `json.dumps`) write: one object
//! of plain strings, plain numbers, `null`, `true`, `false`, the `procs` array
//! and the `sections` map.
//!
//! It gives up (returns `None`) on anything else, and the serde_json pass in
//! `parse.rs` decides: an escape or control character in a string, a number
//! with an exponent, more than 15 significant digits or a fraction longer than
//! 22 digits, a nested value in an unknown field, a duplicate known field, a
//! value of the wrong type. Within what it takes, its numbers are what
//! serde_json reads: integers exactly, and decimals as `digits / 10^k`
//! computed in `f64`, which is correctly rounded (both operands are exact and
//! IEEE division rounds once), as serde_json's own arithmetic is there.

use super::fields::{Fields, Scratch, Str, MAX_FAST_SECTIONS};
use gpumon_core::records::{CapSource, ProcRecord};

/// Significands below this are exact in `f64`.
const EXACT_SIGNIFICAND: u64 = 1 << 53;
/// Powers of ten exact in `f64`.
const POW10: [f64; 23] = [
    1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15, 1e16,
    1e17, 1e18, 1e19, 1e20, 1e21, 1e22,
];

/// Scans `line` into `fields`; `None` when the serde_json pass must decide.
pub(super) fn scan_line(line: &str, fields: &mut Fields, scratch: &mut Scratch) -> Option<()> {
    fields.clear(scratch);
    let mut c = Cursor {
        b: line.as_bytes(),
        i: 0,
    };
    c.eat(b'{')?;
    if c.peek() == Some(b'}') {
        c.i += 1;
    } else {
        loop {
            let key = c.string()?;
            c.eat(b':')?;
            c.field(key, fields, scratch)?;
            match c.peek()? {
                b',' => c.i += 1,
                b'}' => {
                    c.i += 1;
                    break;
                }
                _ => return None,
            }
        }
    }
    c.skip_ws();
    (c.i == c.b.len()).then_some(())
}

/// Stores `value` in an empty slot; `None` (give up) on a duplicate.
#[inline]
fn set<T>(slot: &mut Option<T>, value: T) -> Option<()> {
    if slot.is_some() {
        return None;
    }
    *slot = Some(value);
    Some(())
}

/// A position in the line.
struct Cursor<'a> {
    b: &'a [u8],
    i: usize,
}

impl Cursor<'_> {
    fn skip_ws(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.b.get(self.i) {
            self.i += 1;
        }
    }

    /// The next byte after whitespace, not consumed.
    fn peek(&mut self) -> Option<u8> {
        self.skip_ws();
        self.b.get(self.i).copied()
    }

    /// Consumes `byte` after whitespace.
    fn eat(&mut self, byte: u8) -> Option<()> {
        if self.peek()? != byte {
            return None;
        }
        self.i += 1;
        Some(())
    }

    /// Consumes `word` (`null`, `true`, `false`) if it is next.
    fn word(&mut self, word: &[u8]) -> bool {
        let found = self.b[self.i..].starts_with(word);
        if found {
            self.i += word.len();
        }
        found
    }

    /// A string without escapes or control characters: its content's range.
    fn string(&mut self) -> Option<(usize, usize)> {
        self.eat(b'"')?;
        let start = self.i;
        // The plain part ends at the closing quote, an escape, or a control
        // character (which JSON forbids unescaped).
        let end = start
            + self.b[start..]
                .iter()
                .position(|&c| c == b'"' || c == b'\\' || c < 0x20)?;
        if self.b[end] != b'"' {
            return None;
        }
        self.i = end + 1;
        Some((start, end))
    }

    fn str_value(&mut self) -> Option<Str> {
        let (start, end) = self.string()?;
        Some(Str::Line(start, end))
    }

    /// Digits of an integer part: `0` or `[1-9][0-9]*`, below 2^53; returns
    /// the value and the digit count.
    fn digits(&mut self) -> Option<(u64, u32)> {
        let mut value = 0u64;
        let mut count = 0u32;
        while let Some(&c @ b'0'..=b'9') = self.b.get(self.i) {
            if count == 1 && value == 0 {
                return None; // a leading zero
            }
            value = value * 10 + u64::from(c - b'0');
            count += 1;
            if value >= EXACT_SIGNIFICAND {
                return None;
            }
            self.i += 1;
        }
        (count > 0).then_some((value, count))
    }

    /// An unsigned integer without fraction or exponent.
    fn uint(&mut self) -> Option<u64> {
        self.skip_ws();
        let (value, _) = self.digits()?;
        match self.b.get(self.i) {
            Some(b'.' | b'e' | b'E') => None,
            _ => Some(value),
        }
    }

    fn u32(&mut self) -> Option<u32> {
        u32::try_from(self.uint()?).ok()
    }

    /// A number as `f64`: `-?int(.frac)?`, no exponent.
    fn float(&mut self) -> Option<f64> {
        self.skip_ws();
        let negative = self.b.get(self.i) == Some(&b'-');
        if negative {
            self.i += 1;
        }
        let (mut significand, _) = self.digits()?;
        let mut scale = 0usize;
        if self.b.get(self.i) == Some(&b'.') {
            self.i += 1;
            while let Some(&c @ b'0'..=b'9') = self.b.get(self.i) {
                significand = significand * 10 + u64::from(c - b'0');
                scale += 1;
                if significand >= EXACT_SIGNIFICAND || scale >= POW10.len() {
                    return None;
                }
                self.i += 1;
            }
            if scale == 0 {
                return None;
            }
        }
        if let Some(b'e' | b'E') = self.b.get(self.i) {
            return None;
        }
        // Below 2^53 the significand is exact, and so is the power of ten.
        let magnitude = significand as f64 / POW10[scale];
        Some(if negative { -magnitude } else { magnitude })
    }

    fn opt_float(&mut self) -> Option<Option<f64>> {
        self.skip_ws();
        if self.word(b"null") {
            return Some(None);
        }
        self.float().map(Some)
    }

    fn opt_uint(&mut self) -> Option<Option<u64>> {
        self.skip_ws();
        if self.word(b"null") {
            return Some(None);
        }
        self.uint().map(Some)
    }

    /// A cap's source by name, or null; gives up on a name it does not know
    /// (the careful path names the error).
    fn opt_cap_source(&mut self) -> Option<Option<CapSource>> {
        self.skip_ws();
        if self.word(b"null") {
            return Some(None);
        }
        let (start, end) = self.string()?;
        let name = std::str::from_utf8(&self.b[start..end]).ok()?;
        CapSource::parse(name).map(Some)
    }

    /// Skips a scalar of an unknown field; gives up on arrays and objects.
    fn skip_scalar(&mut self) -> Option<()> {
        match self.peek()? {
            b'"' => self.string().map(drop),
            b'n' => self.word(b"null").then_some(()),
            b't' => self.word(b"true").then_some(()),
            b'f' => self.word(b"false").then_some(()),
            b'-' | b'0'..=b'9' => self.skip_number(),
            _ => None,
        }
    }

    /// Skips a JSON number of any size: `-?int(.frac)?([eE][+-]?exp)?`.
    fn skip_number(&mut self) -> Option<()> {
        if self.b.get(self.i) == Some(&b'-') {
            self.i += 1;
        }
        match self.b.get(self.i)? {
            b'0' => self.i += 1,
            b'1'..=b'9' => self.skip_digits(),
            _ => return None,
        }
        if self.b.get(self.i) == Some(&b'.') {
            self.i += 1;
            if !self.skip_digits_some() {
                return None;
            }
        }
        if let Some(b'e' | b'E') = self.b.get(self.i) {
            self.i += 1;
            if let Some(b'+' | b'-') = self.b.get(self.i) {
                self.i += 1;
            }
            if !self.skip_digits_some() {
                return None;
            }
        }
        Some(())
    }

    fn skip_digits(&mut self) {
        while let Some(b'0'..=b'9') = self.b.get(self.i) {
            self.i += 1;
        }
    }

    fn skip_digits_some(&mut self) -> bool {
        let start = self.i;
        self.skip_digits();
        self.i > start
    }

    /// One field's value, stored by its name `key`.
    fn field(&mut self, key: (usize, usize), f: &mut Fields, s: &mut Scratch) -> Option<()> {
        let b = self.b;
        match &b[key.0..key.1] {
            b"type" => set(&mut f.ty, self.str_value()?),
            b"t" => set(&mut f.t, self.float()?),
            b"node" => set(&mut f.node, self.str_value()?),
            b"gpu" => set(&mut f.gpu, self.u32()?),
            b"uuid" => set(&mut f.uuid, self.str_value()?),
            b"name" => set(&mut f.name, self.str_value()?),
            b"total" => set(&mut f.total, self.uint()?),
            b"used" => set(&mut f.used, self.uint()?),
            b"used_min" => set(&mut f.used_min, self.opt_uint()?),
            b"used_last" => set(&mut f.used_last, self.opt_uint()?),
            b"util" => set(&mut f.util, self.opt_float()?),
            b"sm_clock_mhz" => set(&mut f.sm_clock_mhz, self.opt_float()?),
            b"power_w" => set(&mut f.power_w, self.opt_float()?),
            b"procs" => {
                if std::mem::replace(&mut f.procs, true) {
                    return None;
                }
                self.procs(&mut s.procs)
            }
            b"job" => set(&mut f.job, self.str_value()?),
            b"rank" => set(&mut f.rank, self.u32()?),
            b"local_rank" => set(&mut f.local_rank, self.u32()?),
            b"world_size" => set(&mut f.world_size, self.u32()?),
            b"pid" => set(&mut f.pid, self.u32()?),
            b"allocated" => set(&mut f.allocated, self.uint()?),
            b"reserved" => set(&mut f.reserved, self.uint()?),
            b"peak_allocated" => set(&mut f.peak_allocated, self.opt_uint()?),
            b"inactive_split" => set(&mut f.inactive_split, self.opt_uint()?),
            b"alloc_retries" => set(&mut f.alloc_retries, self.opt_uint()?),
            b"ooms" => set(&mut f.ooms, self.opt_uint()?),
            b"device_total" => set(&mut f.device_total, self.opt_uint()?),
            b"cap" => set(&mut f.cap, self.opt_uint()?),
            b"cap_source" => set(&mut f.cap_source, self.opt_cap_source()?),
            b"step" => set(&mut f.step, self.uint()?),
            b"duration_ms" => set(&mut f.duration_ms, self.float()?),
            b"sections" => {
                if std::mem::replace(&mut f.sections, true) {
                    return None;
                }
                self.sections(s)
            }
            // Out of range goes to the careful path, which names it.
            b"group" => set(
                &mut f.group,
                self.opt_uint()?.map(u32::try_from).transpose().ok()?,
            ),
            b"detail" => {
                self.skip_ws();
                let detail = if self.word(b"null") {
                    None
                } else {
                    Some(self.str_value()?)
                };
                set(&mut f.detail, detail)
            }
            _ => self.skip_scalar(),
        }
    }

    /// `procs`: `[{"pid": N, "used": N}, ...]`.
    fn procs(&mut self, procs: &mut Vec<ProcRecord>) -> Option<()> {
        self.eat(b'[')?;
        if self.peek()? == b']' {
            self.i += 1;
            return Some(());
        }
        loop {
            self.eat(b'{')?;
            let (mut pid, mut used) = (None, None);
            if self.peek()? != b'}' {
                loop {
                    let key = self.string()?;
                    self.eat(b':')?;
                    let b = self.b;
                    match &b[key.0..key.1] {
                        b"pid" => set(&mut pid, self.u32()?)?,
                        b"used" => set(&mut used, self.uint()?)?,
                        _ => self.skip_scalar()?,
                    }
                    if self.peek()? != b',' {
                        break;
                    }
                    self.i += 1;
                }
            }
            self.eat(b'}')?;
            procs.push(ProcRecord {
                pid: pid?,
                used: used?,
            });
            match self.peek()? {
                b',' => self.i += 1,
                b']' => {
                    self.i += 1;
                    return Some(());
                }
                _ => return None,
            }
        }
    }

    /// `sections`: `{"name": ms, ...}` with unique names.
    fn sections(&mut self, s: &mut Scratch) -> Option<()> {
        self.eat(b'{')?;
        if self.peek()? == b'}' {
            self.i += 1;
            return Some(());
        }
        loop {
            let (start, end) = self.string()?;
            self.eat(b':')?;
            let ms = self.float()?;
            let b = self.b;
            let name = &b[start..end];
            if s.sections.len() >= MAX_FAST_SECTIONS
                || s.sections.iter().any(|(n, _)| match *n {
                    Str::Line(a, z) => &b[a..z] == name,
                    Str::Arena(..) => true,
                })
            {
                return None;
            }
            s.sections.push((Str::Line(start, end), ms));
            match self.peek()? {
                b',' => self.i += 1,
                b'}' => {
                    self.i += 1;
                    return Some(());
                }
                _ => return None,
            }
        }
    }
}
