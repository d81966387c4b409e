//! A fuzzer's mutations without a fuzzer: fixed-seed edits of seed inputs, the same on
//! every run and platform, for tests that must stay fast and reproducible.

/// xorshift64*: a tiny generator whose sequence a seed fixes.
pub struct Rng(pub u64);

impl Rng {
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// Uniform enough in `0..n` (0 when `n` is 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n.max(1) as u64) as usize
    }
}

/// Values that sit on the edges parsers get wrong: written over words of binary inputs.
const EDGES: [u64; 8] = [0, 1, 0x7f, 0xff, 0xffff, 0x7fff_ffff, u64::MAX, u64::MAX - 7];

/// One to four edits of `input`: bit flips, random bytes, edge values written as
/// little-endian words, truncation, deletion, duplication of a range, and splices of a
/// piece of one of `others`.
pub fn mutate(rng: &mut Rng, input: &[u8], others: &[&[u8]]) -> Vec<u8> {
    let mut b = input.to_vec();
    for _ in 0..1 + rng.below(4) {
        let len = b.len();
        let at = rng.below(len + 1);
        match rng.below(7) {
            0 if at < len => b[at] ^= 1 << rng.below(8),
            1 if at < len => b[at] = rng.next_u64() as u8,
            2 => {
                let word = EDGES[rng.below(EDGES.len())].to_le_bytes();
                let n = [1, 2, 4, 8][rng.below(4)].min(len - at);
                b[at..at + n].copy_from_slice(&word[..n]);
            }
            3 => b.truncate(at),
            4 => {
                let end = at + rng.below((len - at).min(64) + 1);
                b.drain(at..end);
            }
            5 => {
                let end = at + rng.below((len - at).min(64) + 1);
                let copy = b[at..end].to_vec();
                let to = rng.below(len + 1);
                b.splice(to..to, copy);
            }
            _ if !others.is_empty() => {
                let other = others[rng.below(others.len())];
                let from = rng.below(other.len());
                let piece = &other[from..from + rng.below((other.len() - from).min(128) + 1)];
                b.splice(at..at, piece.iter().copied());
            }
            _ => {}
        }
    }
    b
}
