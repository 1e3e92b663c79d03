// The CUDA plugin's conversions (src/convert.h) against the CPU plugin's
// (reference_backend/cpu/src/dtype.h), bit for bit, built by the host
// compiler (tests/test_cuda_plugin.py). The two plugins must give the same
// bits for cast and fill: every (source, destination) dtype pair of cast on
// special and random values. (The float16 / bfloat16 <-> float conversions
// both use are one shared implementation, <devicekit/plugin_half.h>.)
// Prints "ok", or each mismatch (at most 20) and exits 1.
#include <cstdio>
#include <cstring>
#include <vector>

#include "convert.h"  // the CUDA plugin's (emulator branch of simt.h: plain C++)
#include "dtype.h"    // the CPU plugin's

namespace {

int failures = 0;

void mismatch(const char* what, unsigned long long in, unsigned long long got,
              unsigned long long want) {
  if (failures++ < 20)
    std::printf("%s: input 0x%llx: cuda 0x%llx, cpu 0x%llx\n", what, in, got, want);
}

uint64_t splitmix(uint64_t* s) {
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

template <class T> uint64_t bits_of(const T& x) {
  uint64_t b = 0;
  std::memcpy(&b, &x, sizeof x);
  return b;
}

// The storage types of both plugins, dtype by dtype (same size and bits).
template <int DT> struct Types;
template <> struct Types<DK_DTYPE_FLOAT32> {
  using cuda = float;
  using cpu = float;
};
template <> struct Types<DK_DTYPE_FLOAT16> {
  using cuda = dk_f16;
  using cpu = dkcpu::f16;
};
template <> struct Types<DK_DTYPE_BFLOAT16> {
  using cuda = dk_bf16;
  using cpu = dkcpu::bf16;
};
template <> struct Types<DK_DTYPE_FLOAT64> {
  using cuda = double;
  using cpu = double;
};
template <> struct Types<DK_DTYPE_INT8> {
  using cuda = int8_t;
  using cpu = int8_t;
};
template <> struct Types<DK_DTYPE_INT32> {
  using cuda = int32_t;
  using cpu = int32_t;
};
template <> struct Types<DK_DTYPE_INT64> {
  using cuda = int64_t;
  using cpu = int64_t;
};
template <> struct Types<DK_DTYPE_UINT8> {
  using cuda = uint8_t;
  using cpu = uint8_t;
};
template <> struct Types<DK_DTYPE_BOOL> {
  using cuda = dk_bool;
  using cpu = dkcpu::boolean;
};

// Source bit patterns for dtype S: specials of every kind, then random bits.
std::vector<uint64_t> samples(int s) {
  std::vector<uint64_t> v;
  const double specials[] = {0.0,          -0.0,          1.0,    -1.0,    0.5,    1.5,
                             2.5,          -2.5,          127.0,  128.0,   -129.0, 255.0,
                             256.0,        65504,         65520,  65536,   1e-8,   6e-8,
                             3e-8,         1e30,          -1e30,  3e38,    1e300,  2147483647.0,
                             2147483648.0, -2147483649.0, 9.3e18, -9.3e18, 1.0 / 3};
  uint64_t seed = 12345 + uint64_t(s);
  if (s == DK_DTYPE_BOOL) return {0, 1};
  for (double d : specials) {
    switch (s) {
      case DK_DTYPE_FLOAT32: v.push_back(bits_of(float(d))); break;
      case DK_DTYPE_FLOAT64: v.push_back(bits_of(d)); break;
      case DK_DTYPE_FLOAT16: v.push_back(dkh_double_to_half(d)); break;
      case DK_DTYPE_BFLOAT16: v.push_back(dkh_double_to_bfloat16(d)); break;
      default: v.push_back(uint64_t(int64_t(d > 9e18 ? 9e18 : d < -9e18 ? -9e18 : d)));
    }
  }
  for (uint64_t nan :
       {0x7ff8000000000001ull, 0xfff0000000000001ull, 0x7ff0000000000000ull, 0xfff0000000000000ull,
        0x7fc00001ull, 0xff800001ull, 0x7f800000ull, 0x7e01ull, 0xfc00ull, 0x7fc1ull, 0x7f80ull,
        0x8000000000000000ull, 0x7fffffffffffffffull, 0x80000000ull, 0x7fffffffull})
    v.push_back(nan);
  for (int i = 0; i < 4000; ++i) v.push_back(splitmix(&seed));
  return v;
}

template <int S, int D> void check_pair() {
  using CS = typename Types<S>::cuda;
  using PS = typename Types<S>::cpu;
  using CD = typename Types<D>::cuda;
  using PD = typename Types<D>::cpu;
  for (uint64_t b : samples(S)) {
    CS cs;
    PS ps;
    std::memcpy(&cs, &b, sizeof cs);  // little-endian: the low bytes
    std::memcpy(&ps, &b, sizeof ps);
    const CD got = dk_convert<CD>(cs);
    const PD want = dkcpu::convert<PD>(ps);
    if (bits_of(got) != bits_of(want)) {
      char what[64];
      std::snprintf(what, sizeof what, "cast %s -> %s", dkh_dtype_name(S), dkh_dtype_name(D));
      mismatch(what, bits_of(cs), bits_of(got), bits_of(want));
    }
  }
}

template <int S, int... Ds> void check_from() { (check_pair<S, Ds>(), ...); }

template <int... Ss> void check_all_pairs() { (check_from<Ss, 0, 1, 2, 3, 4, 5, 6, 7, 8>(), ...); }

}  // namespace

int main() {
  // The float16 / bfloat16 conversions themselves are one implementation,
  // <devicekit/plugin_half.h>, used by both plugins: nothing to compare.
  // cast: every (source, destination) pair.
  check_all_pairs<0, 1, 2, 3, 4, 5, 6, 7, 8>();
  if (failures == 0) {
    std::printf("ok\n");
    return 0;
  }
  std::printf("%d mismatches\n", failures);
  return 1;
}
