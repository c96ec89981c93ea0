//! A tiny deterministic random number generator for the bench/test generators
//! (no `rand` dependency; the same sequence on every platform).

/// xorshift64: tiny, deterministic across platforms, good enough to scatter edges.
pub struct XorShift(u64);

impl XorShift {
    pub fn new(seed: u64) -> Self {
        // The all-zero state is a fixed point, so mix the seed away from it.
        let state = seed ^ 0x9E37_79B9_7F4A_7C15;
        Self(if state == 0 {
            0x9E37_79B9_7F4A_7C15
        } else {
            state
        })
    }

    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }

    /// Uniform enough in `0..bound` for `bound > 0` (modulo bias is irrelevant here).
    pub fn below(&mut self, bound: usize) -> usize {
        (self.next_u64() % bound.max(1) as u64) as usize
    }
}
