//! The postcard wire codec, with a size limit and a version check.

use serde::{de::DeserializeOwned, Serialize};
use thiserror::Error;

use crate::uplink::{AgentMessage, CoordinatorReply};

/// A top-level message: an enum whose variant index is `version - 1`.
pub trait Versioned: Serialize + DeserializeOwned {
    /// What the message is, for error texts.
    const NAME: &'static str;
    /// The highest version this build decodes (versions run 1..=MAX_VERSION).
    const MAX_VERSION: u32;
}

impl Versioned for AgentMessage {
    const NAME: &'static str = "agent message";
    const MAX_VERSION: u32 = crate::PROTOCOL_VERSION;
}

impl Versioned for CoordinatorReply {
    const NAME: &'static str = "coordinator reply";
    /// A version 3 message is answered in version 2.
    const MAX_VERSION: u32 = 2;
}

/// Why bytes could not be decoded.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum DecodeError {
    /// The message is larger than the receiver accepts.
    #[error("{what} of {size} bytes exceeds the limit of {max} bytes")]
    TooLarge {
        /// What was being decoded.
        what: &'static str,
        /// Its size.
        size: usize,
        /// The limit.
        max: usize,
    },
    /// The sender speaks a protocol version this build does not know.
    #[error("{what} has protocol version {got}; this build speaks versions 1..={max}: upgrade the older side")]
    UnsupportedVersion {
        /// What was being decoded.
        what: &'static str,
        /// The version found.
        got: u64,
        /// The highest version known here.
        max: u32,
    },
    /// The bytes are not a valid message.
    #[error("malformed {what}: {reason}")]
    Malformed {
        /// What was being decoded.
        what: &'static str,
        /// postcard's reason.
        reason: String,
    },
    /// A valid message followed by extra bytes.
    #[error("{what} has {extra} trailing bytes after a complete message")]
    TrailingBytes {
        /// What was being decoded.
        what: &'static str,
        /// How many bytes were left over.
        extra: usize,
    },
}

/// Encodes a message with postcard.
pub fn encode<T: Serialize>(msg: &T) -> Vec<u8> {
    // postcard fails only for types it cannot represent (e.g. unsized
    // sequences), which none of ours are.
    postcard::to_allocvec(msg).expect("gpumon wire types are postcard-serializable")
}

/// Decodes a top-level message, refusing more than `max_bytes`, unknown
/// versions, malformed bodies and trailing bytes.
pub fn decode<T: Versioned>(bytes: &[u8], max_bytes: usize) -> Result<T, DecodeError> {
    if bytes.len() > max_bytes {
        return Err(DecodeError::TooLarge {
            what: T::NAME,
            size: bytes.len(),
            max: max_bytes,
        });
    }
    let malformed = |e: postcard::Error| DecodeError::Malformed {
        what: T::NAME,
        reason: e.to_string(),
    };
    // postcard writes an enum's variant index as a leading varint.
    let (variant, _) = postcard::take_from_bytes::<u64>(bytes).map_err(malformed)?;
    if variant >= u64::from(T::MAX_VERSION) {
        return Err(DecodeError::UnsupportedVersion {
            what: T::NAME,
            // Saturating: a variant of u64::MAX must not overflow.
            got: variant.saturating_add(1),
            max: T::MAX_VERSION,
        });
    }
    let (msg, rest) = postcard::take_from_bytes::<T>(bytes).map_err(malformed)?;
    if !rest.is_empty() {
        return Err(DecodeError::TrailingBytes {
            what: T::NAME,
            extra: rest.len(),
        });
    }
    Ok(msg)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::Severity;
    use crate::hook::{ActionAck, ActionOutcome, AllocRecord, AllocStats, HookRecord, StepRecord};
    use crate::placement::{PodPlacement, ProcPlacement};
    use crate::sample::HostMemory;
    use crate::sample::{BytesStat, GpuInfo, GpuWindow, ProcWindow, RankInfo};
    use crate::uplink::{
        AgentMessageV1, AgentMessageV2, CoordinatorReplyV2, NodeAlert, PushBatch, PushBatchV2,
        PushOutcome,
    };

    fn push() -> AgentMessage {
        let gpu = GpuInfo {
            uuid: "GPU-1".into(),
            index: 0,
            name: "H100".into(),
            total_bytes: 80 << 30,
        };
        AgentMessage::V1(AgentMessageV1::Push(PushBatch {
            agent_id: "a".into(),
            incarnation: 9,
            seq: 3,
            node: "n".into(),
            dropped_batches: 0,
            windows: vec![GpuWindow {
                gpu,
                start_ms: 1,
                end_ms: 2001,
                samples: 4,
                used_bytes: BytesStat {
                    min: 1,
                    max: 9,
                    last: 5,
                    mean: 4,
                },
                reserved_bytes: None,
                util_pct: None,
                sm_clock_mhz: None,
                power_w: None,
                procs: vec![ProcWindow {
                    pid: 42,
                    used_bytes: BytesStat::single(7),
                    rank: Some(RankInfo {
                        job: "j".into(),
                        rank: 3,
                        local_rank: 3,
                        world_size: 8,
                        master_addr: None,
                        master_port: Some(29500),
                    }),
                }],
            }],
            hook: vec![
                HookRecord::Alloc(AllocRecord {
                    limit: None,
                    t_ms: 2000,
                    job: "j".into(),
                    rank: 3,
                    stats: AllocStats {
                        allocated: 5,
                        reserved: 9,
                        inactive_split: Some(1),
                        ..AllocStats::default()
                    },
                }),
                HookRecord::Step(StepRecord {
                    group: None,
                    t_ms: 2001,
                    job: "j".into(),
                    rank: 3,
                    step: 12,
                    duration_ms: 250.5,
                    sections: vec![("forward".into(), 80.0)],
                    waits: Vec::new(),
                    collectives: Vec::new(),
                }),
            ],
            acks: vec![ActionAck {
                id: 4,
                t_ms: 2002,
                outcome: ActionOutcome::Done {
                    freed_bytes: 3,
                    at_step: Some(12),
                },
                response: None,
            }],
        }))
    }

    #[test]
    fn round_trips() {
        let msg = push();
        assert_eq!(decode::<AgentMessage>(&encode(&msg), 1 << 20).unwrap(), msg);
    }

    #[test]
    fn a_push_with_placements_or_host_memory_is_version_2_and_round_trips() {
        let AgentMessage::V1(AgentMessageV1::Push(batch)) = push() else {
            unreachable!()
        };
        let placement = PodPlacement {
            pod_uid: Some("6f1c2b3a-4d5e-4f60-8a9b-0c1d2e3f4a5b".into()),
            pod_name: Some("trainer-0".into()),
            namespace: Some("ml".into()),
            container_id: Some("ab".repeat(32)),
            container_name: None,
        };
        let host = HostMemory {
            t_ms: 2001,
            total_bytes: 512 << 30,
            used_max_bytes: 300 << 30,
        };
        let placed = vec![ProcPlacement { pid: 42, placement }];
        for (placements, host) in [
            (placed.clone(), None),
            (Vec::new(), Some(host)),
            (placed, Some(host)),
        ] {
            let pushed = PushBatchV2 {
                batch: batch.clone(),
                placements,
                host,
            };
            let msg = AgentMessage::push(pushed.clone());
            let bytes = encode(&msg);
            assert_eq!(bytes[0], 1, "variant 1 is protocol version 2");
            assert_eq!(msg.version(), 2);
            let back = decode::<AgentMessage>(&bytes, 1 << 20).unwrap();
            assert_eq!(back, AgentMessage::V2(AgentMessageV2::Push(pushed)));
        }
        // With neither the push stays version 1, for older coordinators.
        let plain = AgentMessage::push(PushBatchV2::from(batch));
        assert_eq!(plain, push());
        assert_eq!(plain.version(), 1);
    }

    #[test]
    fn a_push_with_a_grouped_step_is_version_3_and_ungrouped_steps_keep_their_encoding() {
        let AgentMessage::V1(AgentMessageV1::Push(batch)) = push() else {
            unreachable!()
        };
        let HookRecord::Step(step) = batch.hook[1].clone() else {
            panic!("{:?}", batch.hook)
        };
        // Step records without a group encode as they always did (variant
        // 1), so Raft logs and pushes of older builds decode unchanged.
        let plain = postcard::to_allocvec(&HookRecord::Step(step.clone())).unwrap();
        assert_eq!(plain[0], 1);
        let grouped = HookRecord::Step(StepRecord {
            group: Some(2),
            ..step.clone()
        });
        let bytes = postcard::to_allocvec(&grouped).unwrap();
        assert_eq!(bytes[0], 3, "a grouped step is a variant of its own");
        assert_eq!(
            &bytes[1..bytes.len() - 1],
            &plain[1..],
            "the same fields, then the group"
        );
        assert_eq!(postcard::from_bytes::<HookRecord>(&bytes).unwrap(), grouped);

        let mut with_group = batch;
        with_group.hook.push(grouped);
        let msg = AgentMessage::push(PushBatchV2::from(with_group.clone()));
        assert!(matches!(msg, AgentMessage::V3(_)));
        assert_eq!(msg.version(), 3);
        let back = decode::<AgentMessage>(&encode(&msg), 1 << 20).unwrap();
        assert_eq!(back, msg);

        // A stall takes version 4, and its variant comes after the grouped step.
        let stall = HookRecord::Stall(crate::StallRecord {
            t_ms: 1,
            job: "j".into(),
            rank: 1,
            step: 9,
            quiet_ms: 20_000,
            source: "flight_recorder".into(),
            waiting: None,
            entered: vec![("0".into(), 9)],
            marker: Some("eval".into()),
        });
        assert_eq!(postcard::to_allocvec(&stall).unwrap()[0], 4);
        let mut with_stall = with_group;
        with_stall.hook.push(stall);
        let msg = AgentMessage::push(PushBatchV2::from(with_stall.clone()));
        assert_eq!(msg.version(), 4);
        let back = decode::<AgentMessage>(&encode(&msg), 1 << 20).unwrap();
        assert_eq!(back, msg);

        // A step with its collective waits takes version 5 and the next
        // variant, with or without a group; without waits nothing changes.
        let waits = vec![crate::GroupWait {
            group: "1".into(),
            calls: 4,
            wait_ms: 12.5,
        }];
        for group in [None, Some(2)] {
            let waited = HookRecord::Step(StepRecord {
                group,
                waits: waits.clone(),
                ..step.clone()
            });
            assert_eq!(postcard::to_allocvec(&waited).unwrap()[0], 5);
            assert_eq!(
                postcard::from_bytes::<HookRecord>(&postcard::to_allocvec(&waited).unwrap())
                    .unwrap(),
                waited
            );
            let mut with_waits = with_stall.clone();
            with_waits.hook.push(waited);
            let msg = AgentMessage::push(PushBatchV2::from(with_waits));
            assert_eq!(msg.version(), 5);
            let back = decode::<AgentMessage>(&encode(&msg), 1 << 20).unwrap();
            assert_eq!(back, msg);
        }
        // A step that lists its collectives one by one is variant 6 and
        // protocol version 6; the same step without them stays variant 5.
        let arrived = HookRecord::Step(StepRecord {
            waits: waits.clone(),
            collectives: vec![crate::CollectiveArrival {
                group: "1".into(),
                seq: 41,
                op: "all_gather_into_tensor".into(),
                entered_ms: 12.25,
                left_ms: 20.5,
                wait_ms: 8.25,
            }],
            ..step.clone()
        });
        let bytes = postcard::to_allocvec(&arrived).unwrap();
        assert_eq!(bytes[0], 6);
        assert_eq!(postcard::from_bytes::<HookRecord>(&bytes).unwrap(), arrived);
        let mut with_arrivals = with_stall.clone();
        with_arrivals.hook.push(arrived);
        let msg = AgentMessage::push(PushBatchV2::from(with_arrivals));
        assert_eq!(msg.version(), 6);
        assert_eq!(decode::<AgentMessage>(&encode(&msg), 1 << 20).unwrap(), msg);

        // Allocator statistics with the process's device limit are variant
        // 7 and protocol version 7; without one they stay variant 0.
        let HookRecord::Alloc(alloc) = with_stall.hook[0].clone() else {
            panic!("the first record is the allocator's");
        };
        let limited = HookRecord::Alloc(AllocRecord {
            limit: Some(crate::DeviceLimit {
                device_total: Some(40 << 30),
                cap: Some(crate::MemoryCap {
                    bytes: 10 << 30,
                    source: crate::CapSource::MemoryFraction,
                }),
            }),
            ..alloc.clone()
        });
        let bytes = postcard::to_allocvec(&limited).unwrap();
        assert_eq!(bytes[0], 7);
        assert_eq!(postcard::from_bytes::<HookRecord>(&bytes).unwrap(), limited);
        let plain = postcard::to_allocvec(&HookRecord::Alloc(alloc)).unwrap();
        assert_eq!(plain[0], 0);
        let mut with_limit = with_stall.clone();
        with_limit.hook.push(limited);
        let msg = AgentMessage::push(PushBatchV2::from(with_limit));
        assert_eq!(msg.version(), 7);
        assert_eq!(decode::<AgentMessage>(&encode(&msg), 1 << 20).unwrap(), msg);
    }

    fn reply() -> CoordinatorReplyV2 {
        CoordinatorReplyV2 {
            outcome: PushOutcome::Committed {
                acked_seq: 3,
                duplicate: false,
            },
            actions: Vec::new(),
            alerts: vec![NodeAlert {
                id: 17,
                kind: "memory_level".into(),
                severity: Severity::Critical,
                message: "host RAM on n is 93.0 % used".into(),
                job: None,
                rank: None,
                t_ms: 2001,
            }],
        }
    }

    #[test]
    fn a_reply_is_in_the_version_of_the_message_and_version_1_has_no_alerts() {
        let v2 = CoordinatorReply::in_version(2, reply());
        let bytes = encode(&v2);
        assert_eq!(bytes[0], 1, "variant 1 is reply version 2");
        let back = decode::<CoordinatorReply>(&bytes, 1 << 20).unwrap();
        assert_eq!(back.into_v2(), reply());

        let v1 = CoordinatorReply::in_version(1, reply());
        let bytes = encode(&v1);
        assert_eq!(bytes[0], 0, "a version 1 message gets a version 1 reply");
        let back = decode::<CoordinatorReply>(&bytes, 1 << 20).unwrap();
        assert_eq!(
            back.into_v2(),
            CoordinatorReplyV2 {
                alerts: Vec::new(),
                ..reply()
            }
        );
    }

    /// [`push`] as encoded by the build before protocol version 2: this
    /// build must still decode it to the same message.
    const V1_PUSH_OF_AN_OLDER_BUILD: &str = "000101610903016e0001054750552d3100044831303080808080c00201d10f040109050400000000012a0707070701016a0303080001bce6010200d00f016a0305090001010000000001d10f016a030c0000000000506f400107666f727761726400000000000054400104d20f0003010c00";

    #[test]
    fn a_version_1_push_of_an_older_build_still_decodes() {
        let hex = V1_PUSH_OF_AN_OLDER_BUILD;
        let bytes: Vec<u8> = (0..hex.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
            .collect();
        assert_eq!(decode::<AgentMessage>(&bytes, 1 << 20).unwrap(), push());
    }

    #[test]
    fn refuses_oversized_before_decoding() {
        let bytes = encode(&push());
        let err = decode::<AgentMessage>(&bytes, 10).unwrap_err();
        assert!(
            matches!(err, DecodeError::TooLarge { max: 10, .. }),
            "{err}"
        );
    }

    #[test]
    fn names_an_unknown_version() {
        let mut bytes = encode(&push());
        bytes[0] = 7; // variant 7 = protocol version 8
        let err = decode::<AgentMessage>(&bytes, 1 << 20).unwrap_err();
        assert_eq!(
            err,
            DecodeError::UnsupportedVersion {
                what: "agent message",
                got: 8,
                max: 7
            }
        );
        assert!(err.to_string().contains("version 8"));
    }

    #[test]
    fn rejects_truncated_and_trailing_bytes() {
        let bytes = encode(&push());
        for cut in [1, bytes.len() / 2, bytes.len() - 1] {
            let err = decode::<AgentMessage>(&bytes[..cut], 1 << 20).unwrap_err();
            assert!(
                matches!(err, DecodeError::Malformed { .. }),
                "cut {cut}: {err}"
            );
        }
        let mut longer = bytes.clone();
        longer.push(0);
        let err = decode::<AgentMessage>(&longer, 1 << 20).unwrap_err();
        assert_eq!(
            err,
            DecodeError::TrailingBytes {
                what: "agent message",
                extra: 1
            }
        );
    }

    #[test]
    fn never_panics_on_arbitrary_bytes() {
        // A small deterministic fuzz: every prefix and every single-byte mutation.
        let bytes = encode(&push());
        let mut state = 0x9e37_79b9_7f4a_7c15_u64;
        for i in 0..bytes.len() {
            let _ = decode::<AgentMessage>(&bytes[..i], 1 << 20);
            for _ in 0..16 {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                let mut m = bytes.clone();
                m[i] = state as u8;
                let _ = decode::<AgentMessage>(&m, 1 << 20);
            }
        }
    }
}
