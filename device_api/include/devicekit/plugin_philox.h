/*
 * DeviceKit plugin runtime: the Philox4x32-10 block function (Salmon et al.,
 * "Parallel Random Numbers: As Easy as 1, 2, 3", SC11) and DeviceKit's
 * counter mapping, as random_bits and random_uniform use them, once, for
 * every plugin, in host and device code alike.
 *
 * Counter-based: block c of the stream is a pure function of (counter, key),
 * so any element can be computed independently, in any order, on any number
 * of threads, and every backend yields the same bits. device_api.h's
 * DK_OP_RANDOM_BITS comment fixes how elements map to counters
 * (dkh_philox_block); the block function is checked against the Random123
 * known-answer vectors (the SDK's oracle, tests/test_base_ops.py).
 *
 * Optional and header-only, like plugin_helpers.h: every function is
 * `static inline` (under nvcc also `__host__ __device__`, see plugin_half.h's
 * DKH_HD), pure, and thread-safe; C11 or C++. Identifiers start with dkh_.
 */
#ifndef DEVICEKIT_PLUGIN_PHILOX_H_
#define DEVICEKIT_PLUGIN_PHILOX_H_

#include <stdint.h>

#ifndef DKH_HD
#if defined(__CUDACC__)
#define DKH_HD static __host__ __device__ __forceinline__
#else
#define DKH_HD static inline
#endif
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* One 128-bit block: four 32-bit words. */
typedef struct dkh_Philox4x32 { uint32_t w[4]; } dkh_Philox4x32;

/* One round: two 32x32->64 multiplies (the portable form compiles to the
 * same instruction as CUDA's __umulhi), their halves mixed with the other two
 * words and the round key. */
DKH_HD void dkh_philox_round(uint32_t c[4], uint32_t k0, uint32_t k1) {
  const uint64_t p0 = (uint64_t)0xD2511F53u * c[0];
  const uint64_t p1 = (uint64_t)0xCD9E8D57u * c[2];
  const uint32_t hi0 = (uint32_t)(p0 >> 32), lo0 = (uint32_t)p0;
  const uint32_t hi1 = (uint32_t)(p1 >> 32), lo1 = (uint32_t)p1;
  c[0] = hi1 ^ c[1] ^ k0;
  c[1] = lo1;
  c[2] = hi0 ^ c[3] ^ k1;
  c[3] = lo0;
}

/* Ten rounds; the key advances by the Weyl constants (golden ratio, sqrt(3))
 * between rounds, nine times in all. */
DKH_HD dkh_Philox4x32 dkh_philox4x32_10(const uint32_t counter[4], const uint32_t key[2]) {
  uint32_t c[4] = {counter[0], counter[1], counter[2], counter[3]};
  uint32_t k0 = key[0], k1 = key[1];
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      k0 += 0x9E3779B9u;
      k1 += 0xBB67AE85u;
    }
    dkh_philox_round(c, k0, k1);
  }
  dkh_Philox4x32 r;
  for (int i = 0; i < 4; ++i) r.w[i] = c[i];
  return r;
}

/* DeviceKit's mapping (DK_OP_RANDOM_BITS): block `c` of stream `seed` is
 * Philox(counter = {lo32(c), hi32(c), 0, 0}, key = {lo32(seed), hi32(seed)});
 * element n of an output is word n % 4 of block offset + n / 4 (mod 2^64). */
DKH_HD dkh_Philox4x32 dkh_philox_block(uint64_t seed, uint64_t c) {
  const uint32_t counter[4] = {(uint32_t)c, (uint32_t)(c >> 32), 0u, 0u};
  const uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
  return dkh_philox4x32_10(counter, key);
}

#ifdef __cplusplus
}
#endif

#endif /* DEVICEKIT_PLUGIN_PHILOX_H_ */
