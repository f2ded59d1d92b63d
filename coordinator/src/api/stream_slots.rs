//! The slots of `GET /api/v1/stream`: at most [`MAX_STREAM_CLIENTS`] open
//! on a replica and [`MAX_STREAMS_PER_CLIENT`] for one client address, so
//! one client cannot take every slot. A slot is freed when its stream ends,
//! including when the stream drops a client too slow to read (see
//! `stream`).

use std::net::IpAddr;

use gpumon_net::admission::{Admission, Admissions, Full};

/// Most streams one replica serves at once.
pub const MAX_STREAM_CLIENTS: usize = 64;

/// Most streams one client address holds at once.
pub const MAX_STREAMS_PER_CLIENT: usize = 4;

/// Why a slot was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NoSlot {
    /// Every slot of the replica is taken.
    Replica,
    /// This client holds its share.
    Client,
}

/// The replica's stream slots; clones share them.
#[derive(Debug, Clone)]
pub struct StreamSlots(Admissions<IpAddr>);

impl Default for StreamSlots {
    fn default() -> Self {
        Self(Admissions::new(MAX_STREAM_CLIENTS, MAX_STREAMS_PER_CLIENT))
    }
}

/// One taken slot, freed on drop.
pub type StreamSlot = Admission<IpAddr>;

impl StreamSlots {
    /// A slot for a stream to `client`, held until dropped.
    pub fn claim(&self, client: IpAddr) -> Result<StreamSlot, NoSlot> {
        self.0.try_admit_from(client).map_err(|full| match full {
            Full::Source => NoSlot::Client,
            Full::Total => NoSlot::Replica,
        })
    }

    /// Streams open now.
    pub fn open(&self) -> usize {
        self.0.held().0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_client_gets_its_share_and_the_slots_come_back() {
        let slots = StreamSlots::default();
        let a: IpAddr = [10, 0, 0, 1].into();
        let b: IpAddr = [10, 0, 0, 2].into();
        let held: Vec<StreamSlot> = (0..MAX_STREAMS_PER_CLIENT)
            .map(|_| slots.claim(a).unwrap())
            .collect();
        assert_eq!(slots.claim(a).unwrap_err(), NoSlot::Client);
        let other = slots.claim(b).expect("another client still gets a slot");
        assert_eq!(slots.open(), MAX_STREAMS_PER_CLIENT + 1);
        drop(held);
        drop(other);
        assert_eq!(slots.open(), 0);
        assert!(slots.claim(a).is_ok());
    }

    #[test]
    fn the_replica_bound_holds_across_clients() {
        let slots = StreamSlots::default();
        let held: Vec<StreamSlot> = (0..MAX_STREAM_CLIENTS)
            .map(|i| {
                slots
                    .claim([10, 0, (i / 250) as u8, (i % 250) as u8].into())
                    .unwrap()
            })
            .collect();
        assert_eq!(
            slots.claim([10, 9, 9, 9].into()).unwrap_err(),
            NoSlot::Replica
        );
        drop(held);
    }
}
