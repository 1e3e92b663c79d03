// The CUDA plugin's conversions (src/half.h, src/convert.h) against the CPU
// plugin's (reference_backend/cpu/src/half.h, dtype.h), bit for bit, built
// by the host compiler (tests/test_cuda_plugin.py). The two plugins must give
// the same bits for cast and fill: every float16 and bfloat16 value widened,
// floats and doubles narrowed around every rounding boundary, and every
// (source, destination) dtype pair of cast on special and random values.
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
      case DK_DTYPE_FLOAT16: v.push_back(dkcpu::double_to_half(d)); break;
      case DK_DTYPE_BFLOAT16: v.push_back(dkcpu::double_to_bfloat16(d)); break;
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
  // Widening: every 16-bit pattern.
  for (uint32_t h = 0; h < 65536; ++h) {
    const uint32_t a = dk_float_bits(dk_half_to_float(uint16_t(h)));
    const uint32_t b = dkcpu::float_bits(dkcpu::half_to_float(uint16_t(h)));
    if (a != b) mismatch("half_to_float", h, a, b);
    const uint32_t c = dk_float_bits(dk_bfloat16_to_float(uint16_t(h)));
    const uint32_t d = dkcpu::float_bits(dkcpu::bfloat16_to_float(uint16_t(h)));
    if (c != d) mismatch("bfloat16_to_float", h, c, d);
  }
  // Narrowing float: every top-16-bit pattern with low bits at and around the
  // rounding boundaries of both formats (13 and 16 dropped bits), and a
  // stride through all floats.
  const uint32_t lows[] = {0,      1,      0x0fff, 0x1000, 0x1001, 0x1fff, 0x2000,
                           0x3000, 0x7fff, 0x8000, 0x8001, 0xc000, 0xffff};
  std::vector<uint32_t> floats;
  for (uint32_t hi = 0; hi < 65536; ++hi)
    for (uint32_t lo : lows) floats.push_back(hi << 16 | lo);
  for (uint64_t x = 0; x < (1ull << 32); x += 4093) floats.push_back(uint32_t(x));
  for (uint32_t x : floats) {
    const float f = dk_bits_float(x);
    const uint16_t a = dk_float_to_half(f), b = dkcpu::float_to_half(f);
    if (a != b) mismatch("float_to_half", x, a, b);
    const uint16_t c = dk_float_to_bfloat16(f), d = dkcpu::float_to_bfloat16(f);
    if (c != d) mismatch("float_to_bfloat16", x, c, d);
  }
  // Narrowing double (round to odd first): random doubles in and around the
  // 16-bit ranges, and doubles just off the float16 / bfloat16 halfway points.
  uint64_t seed = 7;
  for (int i = 0; i < 400000; ++i) {
    uint64_t x = splitmix(&seed);
    if (i % 2) x = (x & 0x800fffffffffffffull) | (uint64_t(1008 + (i >> 1) % 40) << 52);
    double dv;
    std::memcpy(&dv, &x, sizeof dv);
    if (i % 3 == 0) {  // a halfway point between two float16 values, nudged
      const float mid = dk_bits_float((uint32_t(x) & 0x8fffe000u) | 0x38001000u);
      dv = double(mid) * (1 + (i % 2 ? 1e-12 : -1e-12));
    }
    const uint16_t a = dk_double_to_half(dv), b = dkcpu::double_to_half(dv);
    if (a != b) mismatch("double_to_half", x, a, b);
    const uint16_t c = dk_double_to_bfloat16(dv), d = dkcpu::double_to_bfloat16(dv);
    if (c != d) mismatch("double_to_bfloat16", x, c, d);
  }
  // cast: every (source, destination) pair.
  check_all_pairs<0, 1, 2, 3, 4, 5, 6, 7, 8>();
  if (failures == 0) {
    std::printf("ok\n");
    return 0;
  }
  std::printf("%d mismatches\n", failures);
  return 1;
}
