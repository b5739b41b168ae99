//! Bloom filters over the keys of a batch file, kept in memory.
//!
//! A lookup of a key that a file does not hold (most of a join's probes
//! into the older, larger batches of a spine) is answered from the filter
//! without reading the file. The filter is *blocked*: every key sets its
//! bits within one 64-byte line, so a probe touches one cache line. About
//! 10 bits per key give under 2% false positives.

/// Bits per line.
const LINE_BITS: u64 = 512;
/// Bits set per key.
const PROBES: u32 = 7;
/// Bits per expected key.
const BITS_PER_KEY: usize = 10;

/// A blocked Bloom filter of byte-string keys.
#[derive(Debug, Default)]
pub(crate) struct Bloom {
    /// `8 ×` lines words.
    words: Vec<u64>,
}

impl Bloom {
    /// A filter sized for about `keys` keys.
    pub(crate) fn with_keys(keys: usize) -> Self {
        let lines = (keys * BITS_PER_KEY).div_ceil(LINE_BITS as usize).max(1);
        Self {
            words: vec![0; lines * 8],
        }
    }

    /// Whether the filter can exclude anything (a filter of no size
    /// cannot: it holds every key).
    pub(crate) fn is_active(&self) -> bool {
        !self.words.is_empty()
    }

    /// Adds a key.
    pub(crate) fn insert(&mut self, key: &[u8]) {
        if self.words.is_empty() {
            return; // a filter of no size excludes nothing
        }
        let (line, mut h) = self.locate(key);
        for _ in 0..PROBES {
            let bit = h % LINE_BITS;
            self.words[line + (bit / 64) as usize] |= 1 << (bit % 64);
            h = h.rotate_right(9);
        }
    }

    /// False when the key was certainly never added.
    pub(crate) fn may_contain(&self, key: &[u8]) -> bool {
        if self.words.is_empty() {
            return true;
        }
        let (line, mut h) = self.locate(key);
        for _ in 0..PROBES {
            let bit = h % LINE_BITS;
            if self.words[line + (bit / 64) as usize] & (1 << (bit % 64)) == 0 {
                return false;
            }
            h = h.rotate_right(9);
        }
        true
    }

    /// The key's line (its first word) and the hash that picks its bits.
    fn locate(&self, key: &[u8]) -> (usize, u64) {
        let h = hash(key);
        let lines = (self.words.len() / 8) as u64;
        let line = ((h as u128 * lines as u128) >> 64) as usize;
        (line * 8, mix(h ^ 0x5851_F42D_4C95_7F2D))
    }

    /// The filter's words, as a file stores them.
    pub(crate) fn words(&self) -> &[u64] {
        &self.words
    }

    /// A filter of stored words (none, or whole lines).
    pub(crate) fn from_words(words: Vec<u64>) -> Option<Self> {
        words.len().is_multiple_of(8).then_some(Self { words })
    }

    /// Bytes in memory.
    pub(crate) fn size(&self) -> usize {
        self.words.capacity() * 8
    }
}

/// A 64-bit hash of a byte string (word at a time, then a full mix).
fn hash(bytes: &[u8]) -> u64 {
    let mut h = 0x243F_6A88_85A3_08D3 ^ (bytes.len() as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    let mut chunks = bytes.chunks_exact(8);
    for c in &mut chunks {
        let w = u64::from_le_bytes(c.try_into().expect("8 bytes"));
        h = (h ^ w).wrapping_mul(0x9E37_79B9_7F4A_7C15).rotate_left(31);
    }
    let mut tail = [0u8; 8];
    tail[..chunks.remainder().len()].copy_from_slice(chunks.remainder());
    h = (h ^ u64::from_le_bytes(tail)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    mix(h)
}

/// The finalizer of SplitMix64: every input bit moves every output bit.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_filter_holds_every_key_added_and_few_others() {
        let n = 100_000u64;
        let mut bloom = Bloom::with_keys(n as usize);
        for i in 0..n {
            bloom.insert(&i.to_be_bytes());
        }
        for i in 0..n {
            assert!(bloom.may_contain(&i.to_be_bytes()), "lost key {i}");
        }
        let false_positives = (n..2 * n)
            .filter(|i| bloom.may_contain(&i.to_be_bytes()))
            .count();
        assert!(
            false_positives < (n / 33) as usize,
            "{false_positives} false positives"
        );
    }

    #[test]
    fn an_empty_filter_excludes_nothing() {
        assert!(Bloom::default().may_contain(b"any"));
        let bloom = Bloom::with_keys(0);
        assert!(!bloom.may_contain(b"any"));
    }
}
