// The Philox4x32-10 block function (Salmon et al., "Parallel Random Numbers:
// As Easy as 1, 2, 3", SC11), as random_bits and random_uniform use it.
//
// Counter-based: block c of the stream is a pure function of (counter, key),
// so any element can be computed independently, in any order, on any number of
// threads, and every backend yields the same bits. The header's
// DK_OP_RANDOM_BITS comment fixes how elements map to counters; this file is
// only the block function, checked against the Random123 known-answer vectors
// (/work/shared/data/philox4x32_10_kat.json in the project's test data).
#ifndef DEVICEKIT_CPU_PHILOX_H_
#define DEVICEKIT_CPU_PHILOX_H_

#include <cstdint>

namespace dkcpu {

struct Philox4x32 { uint32_t w[4]; };

// One round: two 32x32->64 multiplies, their halves mixed with the other two
// words and the round key.
inline void philox_round(uint32_t c[4], const uint32_t k[2]) {
  const uint64_t p0 = uint64_t(0xD2511F53u) * c[0];
  const uint64_t p1 = uint64_t(0xCD9E8D57u) * c[2];
  const uint32_t hi0 = uint32_t(p0 >> 32), lo0 = uint32_t(p0);
  const uint32_t hi1 = uint32_t(p1 >> 32), lo1 = uint32_t(p1);
  c[0] = hi1 ^ c[1] ^ k[0];
  c[1] = lo1;
  c[2] = hi0 ^ c[3] ^ k[1];
  c[3] = lo0;
}

// Ten rounds; the key advances by the Weyl constants (golden ratio, sqrt(3))
// between rounds, nine times in all.
inline Philox4x32 philox4x32_10(const uint32_t counter[4], const uint32_t key[2]) {
  uint32_t c[4] = {counter[0], counter[1], counter[2], counter[3]};
  uint32_t k[2] = {key[0], key[1]};
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      k[0] += 0x9E3779B9u;
      k[1] += 0xBB67AE85u;
    }
    philox_round(c, k);
  }
  return Philox4x32{{c[0], c[1], c[2], c[3]}};
}

// DeviceKit's mapping (DK_OP_RANDOM_BITS): block `c` of stream `seed` is
// Philox(counter = {lo32(c), hi32(c), 0, 0}, key = {lo32(seed), hi32(seed)});
// element n of an output is word n % 4 of block offset + n / 4 (mod 2^64).
inline Philox4x32 devicekit_block(uint64_t seed, uint64_t c) {
  const uint32_t counter[4] = {uint32_t(c), uint32_t(c >> 32), 0u, 0u};
  const uint32_t key[2] = {uint32_t(seed), uint32_t(seed >> 32)};
  return philox4x32_10(counter, key);
}

}  // namespace dkcpu

#endif  // DEVICEKIT_CPU_PHILOX_H_
