// The payload pattern of tools/pattern.hpp, for the JavaScript checks: 64-bit word k of frame
// `sequence`, and the sequence a frame was made for, recovered from its first word.
const M = (1n << 64n) - 1n;
const MUL = 0x9e3779b97f4a7c15n;

export function patternWord(sequence, k) {
  let x = (BigInt(sequence) * MUL + BigInt(k) * 0xbf58476d1ce4e5b9n + 1n) & M;
  x ^= x >> 31n;
  return x;
}

// Index of the first 64-bit word of `bytes` that is not the pattern of `sequence`; -1 if none.
export function firstPatternMismatch(bytes, sequence) {
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  for (let k = 0; k < Math.floor(bytes.length / 8); k++) {
    if (view.getBigUint64(k * 8, true) !== patternWord(sequence, k)) return k;
  }
  return -1;
}

// The inverse of pattern.hpp's origin_sequence: word 0 = f(sequence) is invertible.
export function originSequence(bytes) {
  const y = new DataView(bytes.buffer, bytes.byteOffset, 8).getBigUint64(0, true);
  const x = y ^ (y >> 31n) ^ (y >> 62n);
  let inv = MUL;
  for (let i = 0; i < 5; i++) inv = (inv * ((2n - ((MUL * inv) & M)) & M)) & M;
  return ((x - 1n) * inv) & M;
}
