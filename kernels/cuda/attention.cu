// Attention: causal scaled-dot-product attention with grouped-query heads
// over a KV cache, with the CPU twin's semantics: q holds the t newest
// positions, k and v all s positions so far, and query row i (position
// s-t+i) sees keys 0..s-t+i.
//
// attention_fwd is a flash-attention-style kernel in fp32. A block takes W
// query rows of one head, one warp per row; key/value tiles of 32 rows are
// staged in shared memory once for all W warps, and each warp keeps an
// online softmax (running max m, running sum l, unnormalised output o):
// lane j scores key j of the tile, the warp's max and sum come from
// shuffles, and each lane accumulates head dimensions lane, lane+32, … of
// p·V. So nothing of size s is ever materialised, and any s fits.
//
// A decoding step has one query row per head: nHeads blocks, far fewer than
// the device has multiprocessors. The keys are then split into ranges
// ("flash-decoding"): each block of the split grid writes its range's
// (m, l, o) to scratch memory, and attention_combine rescales and sums them.
//
// Launch configurations (W, number of splits) are parameters so the tests
// can sweep them; 0 picks by shape.
#include <math.h>

#include <algorithm>

#include "common.cuh"

namespace {

constexpr int kTile = 32; // keys per shared-memory tile: one per lane

template <int DPL> // head dimensions per lane: head_dim ≤ 32·DPL
__global__ void attention_fwd(const float *__restrict__ Q, const float *__restrict__ K, const float *__restrict__ V,
                              float *__restrict__ O, float *__restrict__ PO, float2 *__restrict__ PML, int t, int s,
                              int nh, int nkv, int hd, float scale, int split_len) {
	extern __shared__ float smem[];
	const int W = blockDim.x >> 5;
	const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
	const int h = blockIdx.y, split = blockIdx.z;
	const int kvh = h / (nh / nkv);
	const int qc = nh * hd, kc = nkv * hd, ks = hd + 1; // ks pads K rows: lane j reads row j conflict-free
	float *Ks = smem;                                  // [kTile][hd+1]
	float *Vs = Ks + kTile * ks;                        // [kTile][hd]
	float *Qs = Vs + kTile * hd + warp * hd;            // this warp's query row

	const int i0 = blockIdx.x * W, i = i0 + warp;
	const bool active = i < t;
	const int last = min(i0 + W, t) - 1;
	const int qpos = s - t + i; // keys 0..qpos are visible to row i
	const int kbeg = split * split_len;
	const int kend = min(s - t + last + 1, kbeg + split_len); // keys any row of the block sees

	if (active)
		for (int d = lane; d < hd; d += 32) Qs[d] = Q[(size_t)i * qc + h * hd + d];

	float m = -INFINITY, l = 0.f, o[DPL];
#pragma unroll
	for (int e = 0; e < DPL; ++e) o[e] = 0.f;

	for (int kt = kbeg; kt < kend; kt += kTile) {
		const int nk = min(kTile, kend - kt);
		__syncthreads(); // the previous tile has been used by every warp
		for (int idx = threadIdx.x; idx < nk * hd; idx += blockDim.x) {
			const int r = idx / hd, d = idx - r * hd;
			const size_t g = (size_t)(kt + r) * kc + kvh * hd + d;
			Ks[r * ks + d] = K[g];
			Vs[r * hd + d] = V[g];
		}
		__syncthreads();
		if (!active || kt > qpos) continue; // warp-uniform: this row sees none of the tile

		float sc = -INFINITY;
		if (lane < nk && kt + lane <= qpos) {
			const float *kr = Ks + lane * ks;
			float acc = 0.f;
#pragma unroll 4
			for (int d = 0; d < hd; ++d) acc = fmaf(Qs[d], kr[d], acc);
			sc = acc * scale;
		}
		const float mn = fmaxf(m, warp_max(sc)); // finite: key kt is visible
		const float p = expf(sc - mn);           // 0 for masked keys
		const float alpha = expf(m - mn);        // 0 on the first tile
		l = l * alpha + warp_sum(p);
#pragma unroll
		for (int e = 0; e < DPL; ++e) o[e] *= alpha;
		const int nv = min(nk, qpos - kt + 1);
		for (int j = 0; j < nv; ++j) {
			const float pj = __shfl_sync(kFullMask, p, j);
			const float *vr = Vs + j * hd;
#pragma unroll
			for (int e = 0; e < DPL; ++e) {
				const int d = lane + 32 * e;
				if (d < hd) o[e] = fmaf(pj, vr[d], o[e]);
			}
		}
		m = mn;
	}
	if (!active) return;
	if (PO == nullptr) {
		const float inv = 1.f / l;
#pragma unroll
		for (int e = 0; e < DPL; ++e) {
			const int d = lane + 32 * e;
			if (d < hd) O[(size_t)i * qc + h * hd + d] = o[e] * inv;
		}
		return;
	}
	const size_t row = ((size_t)split * t + i) * nh + h;
#pragma unroll
	for (int e = 0; e < DPL; ++e) {
		const int d = lane + 32 * e;
		if (d < hd) PO[row * hd + d] = o[e];
	}
	if (lane == 0) PML[row] = make_float2(m, l);
}

// attention_combine merges the splits of one (row, head): every split's
// output and sum are rescaled to the largest running max. A split that saw
// no key of the row has m = -inf and weighs nothing; split 0 always holds
// key 0, so the total is never empty.
__global__ void attention_combine(const float *__restrict__ PO, const float2 *__restrict__ PML, float *__restrict__ O,
                                  int t, int nh, int hd, int splits) {
	const int i = blockIdx.x, h = blockIdx.y;
	float mx = -INFINITY;
	for (int c = 0; c < splits; ++c) mx = fmaxf(mx, PML[((size_t)c * t + i) * nh + h].x);
	float sum = 0.f;
	for (int c = 0; c < splits; ++c) {
		const float2 ml = PML[((size_t)c * t + i) * nh + h];
		if (ml.x != -INFINITY) sum += ml.y * expf(ml.x - mx);
	}
	const float inv = 1.f / sum;
	for (int d = threadIdx.x; d < hd; d += blockDim.x) {
		float acc = 0.f;
		for (int c = 0; c < splits; ++c) {
			const size_t row = ((size_t)c * t + i) * nh + h;
			const float2 ml = PML[row];
			if (ml.x != -INFINITY) acc = fmaf(PO[row * hd + d], expf(ml.x - mx), acc);
		}
		O[(size_t)i * nh * hd + h * hd + d] = acc * inv;
	}
}

template <int DPL>
int launch_fwd(fn_ctx *ctx, int warps, int splits, int split_len, const float *Q, const float *K, const float *V,
               float *O, float *PO, float2 *PML, int t, int s, int nh, int nkv, int hd, float scale) {
	const size_t smem = (size_t)(kTile * (hd + 1) + kTile * hd + warps * hd) * sizeof(float);
	if (smem > 48 * 1024) {
		// Above the default limit a kernel must opt in (sm_80: 163 KiB,
		// sm_90: 227 KiB at most).
		FN_CHECK(cudaFuncSetAttribute(attention_fwd<DPL>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
	}
	const dim3 grid((t + warps - 1) / warps, nh, splits);
	attention_fwd<DPL><<<grid, warps * 32, smem, ctx->stream>>>(Q, K, V, O, PO, PML, t, s, nh, nkv, hd, scale,
	                                                            split_len);
	return fn_launched();
}

int launch_fwd_any(fn_ctx *ctx, int warps, int splits, int split_len, const float *Q, const float *K, const float *V,
                   float *O, float *PO, float2 *PML, int t, int s, int nh, int nkv, int hd, float scale) {
	const int dpl = (hd + 31) / 32;
	if (dpl <= 1) return launch_fwd<1>(ctx, warps, splits, split_len, Q, K, V, O, PO, PML, t, s, nh, nkv, hd, scale);
	if (dpl <= 2) return launch_fwd<2>(ctx, warps, splits, split_len, Q, K, V, O, PO, PML, t, s, nh, nkv, hd, scale);
	if (dpl <= 4) return launch_fwd<4>(ctx, warps, splits, split_len, Q, K, V, O, PO, PML, t, s, nh, nkv, hd, scale);
	if (dpl <= 8) return launch_fwd<8>(ctx, warps, splits, split_len, Q, K, V, O, PO, PML, t, s, nh, nkv, hd, scale);
	return FN_ERR_HEAD_DIM;
}

} // namespace

extern "C" int fn_attention(fn_ctx *ctx, int warps, int splits, uint64_t dst, uint64_t q, uint64_t k, uint64_t v,
                            int t, int s, int nh, int nkv, int hd, float scale) {
	FN_ENTER(ctx);
	if (t == 0 || hd == 0) return 0;
	if (hd > FN_MAX_HEAD_DIM) return FN_ERR_HEAD_DIM;
	if (warps == 0) warps = t >= 4 ? 4 : (t >= 2 ? 2 : 1);
	if (warps < 1 || warps > 32 || splits < 0) return FN_ERR_BAD_CONFIG;
	if (nh > 65535) return FN_ERR_BAD_CONFIG;

	int split_len;
	if (splits == 0) {
		// Split the keys only when the grid would not fill the device
		// twice over, and never below two tiles of keys per split.
		const long blocks = (long)((t + warps - 1) / warps) * nh;
		splits = 1;
		if (blocks < 2L * ctx->sms) {
			const long want = (2L * ctx->sms + blocks - 1) / blocks;
			splits = (int)std::max(1L, std::min(want, (long)(s + 2 * kTile - 1) / (2 * kTile)));
		}
		split_len = (s + splits - 1) / splits;
		split_len = (split_len + kTile - 1) / kTile * kTile;
	} else {
		split_len = (s + splits - 1) / splits;
	}
	splits = (s + split_len - 1) / split_len;
	if (splits > 65535) return FN_ERR_BAD_CONFIG;

	const float *Q = fptr(q), *K = fptr(k), *V = fptr(v);
	float *O = fptr(dst);
	if (splits == 1) return launch_fwd_any(ctx, warps, 1, split_len, Q, K, V, O, nullptr, nullptr, t, s, nh, nkv, hd, scale);

	const size_t rows = (size_t)splits * t * nh;
	void *buf = nullptr;
	FN_CHECK(fn_scratch_alloc(ctx, &buf, rows * (sizeof(float2) + hd * sizeof(float))));
	float2 *PML = (float2 *)buf;
	float *PO = (float *)(PML + rows);
	int err = launch_fwd_any(ctx, warps, splits, split_len, Q, K, V, O, PO, PML, t, s, nh, nkv, hd, scale);
	if (err == 0) {
		const int block = std::min(256, (hd + 31) / 32 * 32);
		attention_combine<<<dim3(t, nh), block, 0, ctx->stream>>>(PO, PML, O, t, nh, hd, splits);
		err = fn_launched();
	}
	const cudaError_t f = fn_scratch_free(ctx, buf);
	return err ? err : (int)f;
}
