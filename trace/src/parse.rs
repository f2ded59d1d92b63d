//! The general fast path: one serde_json pass over a record line into
//! [`Fields`], for any JSON the canonical scanner (`scan.rs`) gave up on.
//!
//! It gives up in turn (returns `None`) on anything unusual, leaving the
//! verdict and its message to the careful path in `reader.rs`: a duplicate or
//! mistyped known field (even one the record's type does not use), a line
//! that is not an object, a duplicate or oversized `sections` map. Known
//! fields are read with the very serde impls the owned records use, so where
//! both succeed they agree value for value.

use std::fmt;

use serde::de::{
    self, DeserializeSeed, Deserializer, Error as _, IgnoredAny, MapAccess, SeqAccess, Visitor,
};
use serde::Deserialize;

use super::fields::{Fields, Scratch, Str, MAX_FAST_SECTIONS};
use gpumon_core::records::{CollectiveArrival, GroupWait, ProcRecord};

/// Parses `line` into `fields` in one serde_json pass; `None` when the
/// careful path must decide.
pub(super) fn parse_line(line: &str, fields: &mut Fields, scratch: &mut Scratch) -> Option<()> {
    fields.clear(scratch);
    let mut de = serde_json::Deserializer::from_str(line);
    LineSeed {
        line,
        fields,
        scratch,
    }
    .deserialize(&mut de)
    .ok()?;
    de.end().ok()
}

/// The names of every known field.
enum Key {
    Type,
    T,
    Node,
    Gpu,
    Uuid,
    Name,
    Total,
    Used,
    UsedMin,
    UsedLast,
    Util,
    SmClockMhz,
    PowerW,
    Procs,
    Job,
    Rank,
    LocalRank,
    WorldSize,
    Pid,
    Allocated,
    Reserved,
    PeakAllocated,
    InactiveSplit,
    AllocRetries,
    Ooms,
    DeviceTotal,
    Cap,
    CapSource,
    Step,
    DurationMs,
    Sections,
    Group,
    Waits,
    Collectives,
    Detail,
    Other,
}

impl<'de> Deserialize<'de> for Key {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_identifier(KeyVisitor)
    }
}

struct KeyVisitor;

impl Visitor<'_> for KeyVisitor {
    type Value = Key;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a field name")
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Key, E> {
        Ok(match v {
            "type" => Key::Type,
            "t" => Key::T,
            "node" => Key::Node,
            "gpu" => Key::Gpu,
            "uuid" => Key::Uuid,
            "name" => Key::Name,
            "total" => Key::Total,
            "used" => Key::Used,
            "used_min" => Key::UsedMin,
            "used_last" => Key::UsedLast,
            "util" => Key::Util,
            "sm_clock_mhz" => Key::SmClockMhz,
            "power_w" => Key::PowerW,
            "procs" => Key::Procs,
            "job" => Key::Job,
            "rank" => Key::Rank,
            "local_rank" => Key::LocalRank,
            "world_size" => Key::WorldSize,
            "pid" => Key::Pid,
            "allocated" => Key::Allocated,
            "reserved" => Key::Reserved,
            "peak_allocated" => Key::PeakAllocated,
            "inactive_split" => Key::InactiveSplit,
            "alloc_retries" => Key::AllocRetries,
            "ooms" => Key::Ooms,
            "device_total" => Key::DeviceTotal,
            "cap" => Key::Cap,
            "cap_source" => Key::CapSource,
            "step" => Key::Step,
            "duration_ms" => Key::DurationMs,
            "sections" => Key::Sections,
            "group" => Key::Group,
            "waits" => Key::Waits,
            "collectives" => Key::Collectives,
            "detail" => Key::Detail,
            _ => Key::Other,
        })
    }
}

/// Stores `value` in an empty slot; a second occurrence sends the line to the
/// careful path, which rejects duplicates of the record type's own fields only.
fn set<T, E: de::Error>(slot: &mut Option<T>, value: T) -> Result<(), E> {
    if slot.is_some() {
        return Err(E::custom("duplicate field"));
    }
    *slot = Some(value);
    Ok(())
}

/// The whole line: an object.
struct LineSeed<'l, 's> {
    line: &'l str,
    fields: &'s mut Fields,
    scratch: &'s mut Scratch,
}

impl<'de> DeserializeSeed<'de> for LineSeed<'_, '_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for LineSeed<'_, '_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a record object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let LineSeed {
            line,
            fields: f,
            scratch,
        } = self;
        while let Some(key) = map.next_key::<Key>()? {
            match key {
                Key::Type => set(&mut f.ty, map.next_value_seed(StrSeed::new(line, scratch))?)?,
                Key::T => set(&mut f.t, map.next_value()?)?,
                Key::Node => set(
                    &mut f.node,
                    map.next_value_seed(StrSeed::new(line, scratch))?,
                )?,
                Key::Gpu => set(&mut f.gpu, map.next_value()?)?,
                Key::Uuid => set(
                    &mut f.uuid,
                    map.next_value_seed(StrSeed::new(line, scratch))?,
                )?,
                Key::Name => set(
                    &mut f.name,
                    map.next_value_seed(StrSeed::new(line, scratch))?,
                )?,
                Key::Total => set(&mut f.total, map.next_value()?)?,
                Key::Used => set(&mut f.used, map.next_value()?)?,
                Key::UsedMin => set(&mut f.used_min, map.next_value()?)?,
                Key::UsedLast => set(&mut f.used_last, map.next_value()?)?,
                Key::Util => set(&mut f.util, map.next_value()?)?,
                Key::SmClockMhz => set(&mut f.sm_clock_mhz, map.next_value()?)?,
                Key::PowerW => set(&mut f.power_w, map.next_value()?)?,
                Key::Procs => {
                    if std::mem::replace(&mut f.procs, true) {
                        return Err(A::Error::custom("duplicate field"));
                    }
                    map.next_value_seed(ProcsSeed(&mut scratch.procs))?;
                }
                Key::Job => set(
                    &mut f.job,
                    map.next_value_seed(StrSeed::new(line, scratch))?,
                )?,
                Key::Rank => set(&mut f.rank, map.next_value()?)?,
                Key::LocalRank => set(&mut f.local_rank, map.next_value()?)?,
                Key::WorldSize => set(&mut f.world_size, map.next_value()?)?,
                Key::Pid => set(&mut f.pid, map.next_value()?)?,
                Key::Allocated => set(&mut f.allocated, map.next_value()?)?,
                Key::Reserved => set(&mut f.reserved, map.next_value()?)?,
                Key::PeakAllocated => set(&mut f.peak_allocated, map.next_value()?)?,
                Key::InactiveSplit => set(&mut f.inactive_split, map.next_value()?)?,
                Key::AllocRetries => set(&mut f.alloc_retries, map.next_value()?)?,
                Key::Ooms => set(&mut f.ooms, map.next_value()?)?,
                Key::DeviceTotal => set(&mut f.device_total, map.next_value()?)?,
                Key::Cap => set(&mut f.cap, map.next_value()?)?,
                Key::CapSource => set(&mut f.cap_source, map.next_value()?)?,
                Key::Step => set(&mut f.step, map.next_value()?)?,
                Key::DurationMs => set(&mut f.duration_ms, map.next_value()?)?,
                Key::Sections => {
                    if std::mem::replace(&mut f.sections, true) {
                        return Err(A::Error::custom("duplicate field"));
                    }
                    map.next_value_seed(SectionsSeed { line, scratch })?;
                }
                Key::Group => set(&mut f.group, map.next_value()?)?,
                Key::Waits => {
                    if std::mem::replace(&mut f.waits, true) {
                        return Err(A::Error::custom("duplicate field"));
                    }
                    scratch.waits = map
                        .next_value::<Option<Vec<GroupWait>>>()?
                        .unwrap_or_default();
                }
                Key::Collectives => {
                    if std::mem::replace(&mut f.collectives, true) {
                        return Err(A::Error::custom("duplicate field"));
                    }
                    scratch.collectives = map
                        .next_value::<Option<Vec<CollectiveArrival>>>()?
                        .unwrap_or_default();
                }
                Key::Detail => set(
                    &mut f.detail,
                    map.next_value_seed(OptStrSeed(StrSeed::new(line, scratch)))?,
                )?,
                Key::Other => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(())
    }
}

/// A string, kept as its position in the line when serde_json could borrow it.
struct StrSeed<'l, 's> {
    line: &'l str,
    arena: &'s mut String,
}

impl<'l, 's> StrSeed<'l, 's> {
    fn new(line: &'l str, scratch: &'s mut Scratch) -> Self {
        StrSeed {
            line,
            arena: &mut scratch.arena,
        }
    }
}

impl<'de> DeserializeSeed<'de> for StrSeed<'_, '_> {
    type Value = Str;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Str, D::Error> {
        deserializer.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for StrSeed<'_, '_> {
    type Value = Str;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a string")
    }

    fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Str, E> {
        // serde_json borrows from the line it was given; check rather than trust.
        let start = (v.as_ptr() as usize).wrapping_sub(self.line.as_ptr() as usize);
        let end = start.wrapping_add(v.len());
        if start <= end && end <= self.line.len() {
            Ok(Str::Line(start, end))
        } else {
            self.visit_str(v)
        }
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Str, E> {
        Ok(Str::copy(v, self.arena))
    }
}

/// `null` or a string (`detail`).
struct OptStrSeed<'l, 's>(StrSeed<'l, 's>);

impl<'de> DeserializeSeed<'de> for OptStrSeed<'_, '_> {
    type Value = Option<Str>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_option(self)
    }
}

impl<'de> Visitor<'de> for OptStrSeed<'_, '_> {
    type Value = Option<Str>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("null or a string")
    }

    fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        self.0.deserialize(deserializer).map(Some)
    }
}

/// `procs`: a sequence of [`ProcRecord`], read by its own serde impl.
struct ProcsSeed<'s>(&'s mut Vec<ProcRecord>);

impl<'de> DeserializeSeed<'de> for ProcsSeed<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for ProcsSeed<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a sequence")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while let Some(proc) = seq.next_element::<ProcRecord>()? {
            self.0.push(proc);
        }
        Ok(())
    }
}

/// `sections`: a map of name to ms with unique names.
struct SectionsSeed<'l, 's> {
    line: &'l str,
    scratch: &'s mut Scratch,
}

impl<'de> DeserializeSeed<'de> for SectionsSeed<'_, '_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for SectionsSeed<'_, '_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a map")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let SectionsSeed { line, scratch } = self;
        loop {
            let Some(name) = map.next_key_seed(StrSeed::new(line, scratch))? else {
                return Ok(());
            };
            let ms: f64 = map.next_value()?;
            let text = name.text(line, &scratch.arena);
            // A map keeps the last of duplicate names; leave that to the careful path.
            if scratch.sections.len() >= MAX_FAST_SECTIONS
                || scratch
                    .sections
                    .iter()
                    .any(|(n, _)| n.text(line, &scratch.arena) == text)
            {
                return Err(A::Error::custom("duplicate or too many sections"));
            }
            scratch.sections.push((name, ms));
        }
    }
}
