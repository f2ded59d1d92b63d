//! The hash that puts a job (or a node) in a group: FNV-1a 64 over the
//! name's UTF-8 bytes, then jump consistent hash over the number of groups.
//!
//! Both are written here from their published definitions, in integer
//! arithmetic only, because the answer is a contract: every agent, every
//! coordinator and every later build must put a job in the same group.
//! `std`'s `DefaultHasher` promises none of that (its algorithm may change
//! between releases, and `RandomState` seeds it per process).
//!
//! - FNV-1a 64 (Fowler, Noll, Vo): start from the offset basis; for each
//!   byte, XOR it in, then multiply by the FNV prime, modulo 2^64.
//! - Jump consistent hash (Lamping and Veach, "A Fast, Minimal Memory,
//!   Consistent Hash Algorithm", 2014): a key's bucket among `n` changes,
//!   when `n` grows to `n + 1`, only for about 1/(n + 1) of the keys, and
//!   then only to the new bucket. So adding a group moves the fewest jobs,
//!   and none between old groups. The paper computes one step in floating
//!   point; here it is the exact integer division
//!   `((b + 1) << 31) / ((key >> 33) + 1)`, which no platform's rounding
//!   can change.

/// FNV-1a 64's offset basis.
pub const FNV_OFFSET_BASIS: u64 = 0xcbf2_9ce4_8422_2325;
/// FNV-1a 64's prime, 2^40 + 2^8 + 0xb3.
pub const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;
/// The multiplier of jump consistent hash's linear congruential step.
const JUMP_MULTIPLIER: u64 = 2_862_933_555_777_941_757;

/// FNV-1a 64 of `bytes`.
pub fn fnv1a_64(bytes: &[u8]) -> u64 {
    bytes.iter().fold(FNV_OFFSET_BASIS, |hash, &byte| {
        (hash ^ u64::from(byte)).wrapping_mul(FNV_PRIME)
    })
}

/// The bucket of `key` among `buckets` (0 to `buckets - 1`) by jump
/// consistent hash. No buckets answers 0, as one would.
pub fn jump_hash(key: u64, buckets: u32) -> u32 {
    let buckets = u64::from(buckets.max(1));
    let mut key = key;
    let mut bucket: u64 = 0;
    let mut next: u64 = 0;
    while next < buckets {
        bucket = next;
        key = key.wrapping_mul(JUMP_MULTIPLIER).wrapping_add(1);
        // bucket < 2^32, so (bucket + 1) << 31 <= 2^63 fits; the divisor is
        // at least 1.
        next = ((bucket + 1) << 31) / ((key >> 33) + 1);
    }
    // bucket < buckets <= u32::MAX + 1, and the loop ran at least once.
    u32::try_from(bucket).unwrap_or(u32::MAX)
}

/// The bucket of a name among `buckets`: [`jump_hash`] of [`fnv1a_64`].
pub fn bucket_of(name: &str, buckets: u32) -> u32 {
    jump_hash(fnv1a_64(name.as_bytes()), buckets)
}

#[cfg(test)]
mod tests {
    use super::*;

    // FNV-1a 64 test vectors from the FNV authors' published list: the empty
    // string is the offset basis itself; "a" is one round,
    // (0xcbf29ce484222325 ^ 0x61) * 0x100000001b3 mod 2^64.
    #[test]
    fn fnv1a_64_matches_the_published_vectors() {
        assert_eq!(fnv1a_64(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a_64(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a_64(b"foobar"), 0x8594_4171_f739_67e8);
    }

    #[test]
    fn fnv1a_64_of_gpumon_names() {
        // Computed with an independent implementation of the definition
        // (arbitrary-precision integers, reduced mod 2^64 at each step).
        assert_eq!(fnv1a_64(b"job-a"), 0xf2c3_1880_2009_4686);
        assert_eq!(fnv1a_64(b"job-19072"), 0xd8ad_9ea8_064f_d1d6);
        assert_eq!(fnv1a_64(b"node-0"), 0xe696_ebc2_2078_7810);
    }

    #[test]
    fn jump_hash_of_key_zero_is_bucket_zero() {
        // By hand: key = 0 * m + 1 = 1; next = (0 + 1) * 2^31 / ((1 >> 33) + 1)
        // = 2^31, past any bucket count below 2^31, so the answer is 0.
        for buckets in [1, 2, 4, 16, 1000, 1 << 30] {
            assert_eq!(jump_hash(0, buckets), 0);
        }
    }

    #[test]
    fn jump_hash_matches_the_definition() {
        // From an independent implementation of the integer form of the
        // definition (arbitrary-precision integers).
        let cases: [(u64, [u32; 5]); 5] = [
            (1, [0, 0, 0, 6, 549]),
            (u64::MAX, [0, 1, 2, 10, 313]),
            (0xcbf2_9ce4_8422_2325, [0, 1, 1, 13, 266]),
            (0xaf63_dc4c_8601_ec8c, [0, 1, 2, 12, 163]),
            (0xd8ad_9ea8_064f_d1d6, [0, 0, 0, 12, 557]),
        ];
        for (key, want) in cases {
            let got = [1, 2, 4, 16, 1000].map(|n| jump_hash(key, n));
            assert_eq!(got, want, "key {key:#x}");
        }
    }

    #[test]
    fn no_buckets_is_one_bucket() {
        assert_eq!(jump_hash(u64::MAX, 0), 0);
        assert_eq!(bucket_of("job-a", 0), 0);
    }

    #[test]
    fn bucket_of_is_jump_of_fnv() {
        assert_eq!(bucket_of("job-a", 16), 8);
        assert_eq!(bucket_of("foobar", 1000), 635);
        assert_eq!(bucket_of("node-0", 1000), 848);
    }

    #[test]
    fn jobs_spread_evenly() {
        for buckets in [4u32, 16] {
            let mut counts = vec![0u32; buckets as usize];
            for i in 0..10_000 {
                counts[bucket_of(&format!("job-{i}"), buckets) as usize] += 1;
            }
            let mean = 10_000 / buckets;
            for (bucket, &n) in counts.iter().enumerate() {
                assert!(
                    n.abs_diff(mean) * 10 <= mean,
                    "{buckets} buckets: bucket {bucket} holds {n}, mean {mean}: {counts:?}"
                );
            }
        }
    }

    #[test]
    fn a_new_bucket_takes_its_share_and_moves_nothing_else() {
        let mut moved = 0;
        for i in 0..10_000 {
            let name = format!("job-{i}");
            let (before, after) = (bucket_of(&name, 4), bucket_of(&name, 5));
            if before != after {
                assert_eq!(after, 4, "{name} moved from {before} to {after}");
                moved += 1;
            }
        }
        // About a fifth: the new bucket's share.
        assert!((1_800..=2_200).contains(&moved), "{moved} of 10000 moved");
    }
}
