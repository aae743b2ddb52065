// Native CPU kernels of one incremental decoding step, in fp32, built and loaded by lightning_modules/native.py.
//
// decode_attention: every query is one new position, and it attends to a list of cached key rows (its own beam's
// ancestors for self-attention, the real source tokens for cross-attention). Why a kernel: PyTorch's fused
// attention pays a per-(row, head) setup that dominates at one query against a few dozen keys, and its masked form
// scores every beam slot of the cache (K times the work). Here a query reads only the rows it attends, each a
// contiguous d_k-vector: its scores, their softmax, then the weighted sum of the values. The result equals
// softmax(q k^T / sqrt(d_k)) v to fp32 rounding.
//
// beam_candidates: the 2K best (beam, token) continuations of each source from the K x V scores of its beams, in one
// pass that finds, 16 tokens at a time with a vector compare, the few sums able to enter the list; torch.topk over
// the flattened K x V scores copies and heap-sorts every (value, index) pair, ten times slower at a few thousand.
#include <cstdint>
#include <cstring>
#include <vector>
#if defined(__AVX512F__)
#include <immintrin.h>
#endif

namespace {

// e^x for x <= 0 (Cephes' single-precision polynomial, relative error ~1e-7). Branch-free and without libm calls,
// so that the softmax loop vectorises.
inline float exp_nonpositive(float x) {
    x = x < -87.0f ? -87.0f : x;
    const float n = __builtin_floorf(x * 1.44269504088896341f + 0.5f);
    const float r = x - n * 0.693359375f - n * -2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    const int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
    float scale;
    std::memcpy(&scale, &bits, sizeof scale);
    return p * scale;
}

// Every cache line of a row of `d` floats.
inline void prefetch(const float* row, int64_t d) {
    for (int64_t j = 0; j < d; j += 16) __builtin_prefetch(row + j);
}

template <int D>
inline float dot(const float* __restrict a, const float* __restrict b, int64_t d) {
#if defined(__AVX512F__)
    if constexpr (D > 0 && D % 16 == 0) {
        __m512 sum = _mm512_mul_ps(_mm512_loadu_ps(a), _mm512_loadu_ps(b));
        for (int j = 16; j < D; j += 16) sum = _mm512_fmadd_ps(_mm512_loadu_ps(a + j), _mm512_loadu_ps(b + j), sum);
        return _mm512_reduce_add_ps(sum);
    }
#endif
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int64_t j = 0; j < (D ? D : d); ++j) sum += a[j] * b[j];
    return sum;
}

// w[i] <- e^(w[i] - max w) in place; returns their sum.
inline float softmax(float* __restrict w, int64_t n) {
    float top = -__builtin_inff();
#pragma omp simd reduction(max : top)
    for (int64_t i = 0; i < n; ++i) top = w[i] > top ? w[i] : top;
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int64_t i = 0; i < n; ++i) {
        w[i] = exp_nonpositive(w[i] - top);
        sum += w[i];
    }
    return sum;
}

struct Args {
    const float* q;  // [B*K, H, dk]: query of beam k of source b, head h
    const float* k;  // key row r of source b, key/value head g at k + b*k_b + g*k_g + r*k_row (dk contiguous floats)
    const float* v;  // value row likewise, dv contiguous floats
    float* out;      // [B*K, H, dv]
    int64_t k_b, k_g, k_row, v_b, v_g, v_row;
    const int64_t* origin;  // [B, K, L] or null: beam k's row at position p is p*K + origin[b, k, p]; null: row p
    const uint8_t* valid;   // [B, L] or null: whether position p may be attended (null: all)
    int64_t B, K, H, G, L, dk, dv;
    float scale;
};

// Beams [beam0, beam0 + NB) of source b, head h: NB queries go through their key rows in address order, then
// through their value rows, with NB independent accumulators. `rows[beam * L + i]` is the i-th row beam attends.
template <int DK, int DV, int NB>
void attend_beams(const Args& a, int64_t b, int64_t h, int64_t beam0, int64_t n, const int64_t* rows, float* scores) {
    const int64_t dk = DK ? DK : a.dk, dv = DV ? DV : a.dv, g = h / (a.H / a.G), L = a.L;
    const float* __restrict keys = a.k + b * a.k_b + g * a.k_g;
    const float* __restrict values = a.v + b * a.v_b + g * a.v_g;
    const float* q[NB];
    const int64_t* row[NB];
    float* __restrict w[NB];
    for (int j = 0; j < NB; ++j) {
        q[j] = a.q + ((b * a.K + beam0 + j) * a.H + h) * dk;
        row[j] = rows + (beam0 + j) * L;
        w[j] = scores + j * L;
    }
    float total[NB];
    // The rows skip the other beams' slots, a pattern the hardware prefetcher does not follow: ask for the keys a
    // few rows ahead, and for the values the second pass reads.
    constexpr int64_t ahead = 16;
    const bool next_head = g + 1 < a.G && (h + 1) % (a.H / a.G) == 0;
    for (int64_t i = 0; i < n && i < ahead; ++i)
        for (int j = 0; j < NB; ++j) prefetch(keys + row[j][i] * a.k_row, dk);
    for (int64_t i = 0; i < n; ++i)
        for (int j = 0; j < NB; ++j) {
            if (i + ahead < n) prefetch(keys + row[j][i + ahead] * a.k_row, dk);
            prefetch(values + row[j][i] * a.v_row, dv);
            if (next_head) {  // the next head reads the same rows, one head further: ask now, it arrives in time
                prefetch(keys + row[j][i] * a.k_row + a.k_g, dk);
                prefetch(values + row[j][i] * a.v_row + a.v_g, dv);
            }
            w[j][i] = dot<DK>(q[j], keys + row[j][i] * a.k_row, dk) * a.scale;
        }
    for (int j = 0; j < NB; ++j) total[j] = softmax(w[j], n);
    float acc_fixed[NB][DV ? DV : 1] = {};
    std::vector<float> acc_heap(DV ? 0 : NB * dv, 0.0f);
    for (int64_t i = 0; i < n; ++i)
        for (int j = 0; j < NB; ++j) {
            float* __restrict acc = DV ? acc_fixed[j] : acc_heap.data() + j * dv;
            const float* __restrict value = values + row[j][i] * a.v_row;
            const float wi = w[j][i];
#pragma omp simd
            for (int64_t d = 0; d < dv; ++d) acc[d] += wi * value[d];
        }
    for (int j = 0; j < NB; ++j) {
        const float* acc = DV ? acc_fixed[j] : acc_heap.data() + j * dv;
        float* __restrict out = a.out + ((b * a.K + beam0 + j) * a.H + h) * dv;
        const float inverse = 1.0f / total[j];
#pragma omp simd
        for (int64_t d = 0; d < dv; ++d) out[d] = acc[d] * inverse;
    }
}

// Sources are independent: with OpenMP (PyTorch's own runtime, already loaded) they are split across `threads`.
template <int DK, int DV>
void attend(const Args& a, int threads) {
    const int64_t K = a.K, L = a.L;
#pragma omp parallel num_threads(threads) if (threads > 1 && a.B > 1)
    {
        std::vector<int64_t> positions(L), rows(K * L);
        std::vector<float> scores(4 * L);  // [4 beams, L]
#pragma omp for schedule(static)
        for (int64_t b = 0; b < a.B; ++b) {
            const uint8_t* ok = a.valid ? a.valid + b * L : nullptr;
            int64_t n = 0;  // the positions attended, the same for every beam
            for (int64_t p = 0; p < L; ++p)
                if (!ok || ok[p]) positions[n++] = p;
            if (n == 0) {  // nothing to attend: NaN, as softmax over no keys
                for (int64_t r = 0; r < K * a.H * a.dv; ++r) a.out[b * K * a.H * a.dv + r] = __builtin_nanf("");
                continue;
            }
            for (int64_t beam = 0; beam < K; ++beam) {
                const int64_t* slot = a.origin ? a.origin + (b * K + beam) * L : nullptr;
                for (int64_t i = 0; i < n; ++i) rows[beam * L + i] = slot ? positions[i] * K + slot[positions[i]] : positions[i];
            }
            for (int64_t h = 0; h < a.H; ++h) {
                int64_t beam0 = 0;
                for (; beam0 + 4 <= K; beam0 += 4) attend_beams<DK, DV, 4>(a, b, h, beam0, n, rows.data(), scores.data());
                switch (K - beam0) {
                    case 3: attend_beams<DK, DV, 3>(a, b, h, beam0, n, rows.data(), scores.data()); break;
                    case 2: attend_beams<DK, DV, 2>(a, b, h, beam0, n, rows.data(), scores.data()); break;
                    case 1: attend_beams<DK, DV, 1>(a, b, h, beam0, n, rows.data(), scores.data()); break;
                    default: break;
                }
            }
        }
    }
}

// The n best (value, index) pairs offered, best first. Indices are offered in increasing order and only a strictly
// greater value moves ahead, so among equal values the earlier index ranks first.
struct Best {
    float* value;
    int64_t* index;
    int64_t n, count = 0;

    bool full() const { return count == n; }
    float worst() const { return value[n - 1]; }
    void offer(float v, int64_t i) {
        if (full() && !(v > worst())) return;
        int64_t p = full() ? n - 1 : count++;
        for (; p > 0 && v > value[p - 1]; --p) {
            value[p] = value[p - 1];
            index[p] = index[p - 1];
        }
        value[p] = v;
        index[p] = i;
    }
};

inline bool listed(int64_t id, const int64_t* ids, int64_t n) {
    for (int64_t i = 0; i < n; ++i)
        if (ids[i] == id) return true;
    return false;
}

// Offers row[j] + score as candidate base + j for every token j not banned. Only sums greater than the list's worst
// can enter once it is full: they are found 16 at a time with a vector compare (AVX-512) or, elsewhere, by skipping
// blocks whose largest token cannot enter (float addition is monotonic, so none of the block's sums could).
void offer_row(Best& best, const float* __restrict row, float score, int64_t V, int64_t base, const int64_t* banned,
               int64_t n_banned) {
    auto offer = [&](int64_t j) {
        const float value = row[j] + score;
        if ((!best.full() || value > best.worst()) && !listed(j, banned, n_banned)) best.offer(value, base + j);
    };
    int64_t j = 0;
    for (; j < V && !best.full(); ++j) offer(j);
#if defined(__AVX512F__)
    const __m512 add = _mm512_set1_ps(score);
    for (; j + 16 <= V; j += 16) {
        __mmask16 enter = _mm512_cmp_ps_mask(_mm512_add_ps(_mm512_loadu_ps(row + j), add), _mm512_set1_ps(best.worst()), _CMP_GT_OQ);
        for (; enter; enter &= enter - 1) offer(j + __builtin_ctz(enter));
    }
#else
    constexpr int64_t block = 32;
    for (; j + block <= V; j += block) {
        float top = -__builtin_inff();
#pragma omp simd reduction(max : top)
        for (int64_t i = j; i < j + block; ++i) top = row[i] > top ? row[i] : top;
        if (top + score > best.worst())
            for (int64_t i = j; i < j + block; ++i) offer(i);
    }
#endif
    for (; j < V; ++j) offer(j);
}

}  // namespace

extern "C" int decode_attention(const float* q, const float* k, const float* v, float* out,
                                 int64_t k_b, int64_t k_g, int64_t k_row, int64_t v_b, int64_t v_g, int64_t v_row,
                                 const int64_t* origin, const uint8_t* valid,
                                 int64_t B, int64_t K, int64_t H, int64_t G, int64_t L, int64_t dk, int64_t dv, float scale,
                                 int threads) {
    if (G < 1 || H % G) return 1;
    const Args a{q, k, v, out, k_b, k_g, k_row, v_b, v_g, v_row, origin, valid, B, K, H, G, L, dk, dv, scale};
    if (dk == 16 && dv == 16) attend<16, 16>(a, threads);
    else if (dk == 32 && dv == 32) attend<32, 32>(a, threads);
    else if (dk == 64 && dv == 64) attend<64, 64>(a, threads);
    else if (dk == 128 && dv == 128) attend<128, 128>(a, threads);
    else attend<0, 0>(a, threads);
    return 0;
}

// logp [B, K, V]: each beam's next-token log-probabilities; scores [B, K]: each beam's log-probability so far. For each
// source b, the n best logp[b, k, j] + scores[b, k] over (k, j) with j not banned, as values [B, n] and flat indices
// k*V + j [B, n], best first. Where only_eos[b] (a source at its length limit) the only finite candidates are the
// beams' EOS; places the list cannot fill with finite candidates hold -inf.
extern "C" void beam_candidates(const float* logp, const float* scores, int64_t B, int64_t K, int64_t V,
                                const int64_t* banned, int64_t n_banned, const uint8_t* only_eos, int64_t eos, int64_t n,
                                float* values, int64_t* indices, int threads) {
#pragma omp parallel for schedule(static) num_threads(threads) if (threads > 1 && B > 1)
    for (int64_t b = 0; b < B; ++b) {
        Best best{values + b * n, indices + b * n, n};
        const bool eos_only = only_eos && only_eos[b];
        for (int64_t k = 0; k < K; ++k) {
            const float score = scores[b * K + k];
            const float* row = logp + (b * K + k) * V;
            if (eos_only) best.offer(row[eos] + score, k * V + eos);
            else if (!(best.full() && score == -__builtin_inff())) offer_row(best, row, score, V, k * V, banned, n_banned);
        }
        for (int64_t i = 0; !best.full() && i < K * V; ++i)  // fewer candidates than places: -inf, as topk gives
            if (!listed(i, best.index, best.count)) best.offer(-__builtin_inff(), i);
    }
}
