// Dropout's noise for training on CPU, built with decoding.cpp into one library by lightning_modules/native.py.
//
// dropout_noise: n values, each 0 with probability p and 1 / (1 - p) otherwise, as fp32 or bf16 (the noise tensor
// that dropout multiplies its input by, as torch.nn.functional.dropout builds it). Why a kernel: torch's Bernoulli
// sampler draws about 6 ns per element on one core, a tenth of a CPU training step at the bench's dimensions; a
// counter-based hash draws each value from (seed, index) alone, vectorises, and gives the same noise for any
// number of threads.
#include <cstdint>
#include <cstring>

namespace {

// SplitMix64's finaliser: a bijective mix whose outputs over consecutive inputs pass BigCrush.
inline uint64_t mix(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

// bf16 by round-to-nearest-even of the fp32 bits (the scale is finite and positive).
inline uint16_t to_bf16(float x) {
    uint32_t bits;
    std::memcpy(&bits, &x, sizeof bits);
    return static_cast<uint16_t>((bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16);
}

template <typename T>
void fill(T* __restrict out, int64_t n, uint64_t seed, uint32_t threshold, T keep, int threads) {
    const uint64_t base = mix(seed);
    auto draw = [base](int64_t i) { return mix(base + 0x9E3779B97F4A7C15ull * static_cast<uint64_t>(i + 1)); };
    // One 64-bit draw makes two 32-bit uniforms: element i of each half, so that both halves are written in order.
    const int64_t half = n / 2;
#pragma omp parallel for simd schedule(static) num_threads(threads) if (threads > 1 && half > 65536)
    for (int64_t i = 0; i < half; ++i) {
        const uint64_t bits = draw(i);
        out[i] = static_cast<uint32_t>(bits) >= threshold ? keep : T(0);
        out[half + i] = static_cast<uint32_t>(bits >> 32) >= threshold ? keep : T(0);
    }
    if (n % 2) out[n - 1] = static_cast<uint32_t>(draw(half)) >= threshold ? keep : T(0);
}

}  // namespace

// out: n values of fp32 (bf16 = 0) or bf16 (bf16 = 1) bits. An element is kept when its 32-bit uniform reaches
// `threshold` (p * 2^32, rounded up), so with probability 1 - p to within 2^-32.
extern "C" void dropout_noise(void* out, int64_t n, int bf16, uint64_t seed, uint32_t threshold, float keep_scale,
                              int threads) {
    if (bf16) fill(static_cast<uint16_t*>(out), n, seed, threshold, to_bf16(keep_scale), threads);
    else fill(static_cast<float*>(out), n, seed, threshold, keep_scale, threads);
}
