// AttentionBackward: the gradient of causal grouped-query attention over a
// full sequence (q, k, v all cover positions 0..t-1), recomputing the
// probabilities from q and k rather than storing them, as flash attention's
// backward does. With s_ij = scale·q_i·k_j for j ≤ i, P = softmax_j(s),
// O = P·V and dO the incoming gradient:
//
//   dP_ij = dO_i·v_j        D_i = Σ_j P_ij·dP_ij  (= dO_i·O_i)
//   dS_ij = P_ij·(dP_ij − D_i)
//   dQ_i = scale·Σ_j dS_ij·k_j    dK_j = scale·Σ_i dS_ij·q_i    dV_j = Σ_i P_ij·dO_i
//
// dK and dV also sum over the query heads that share the key/value head.
//
// Two kernels, both in the warp-per-row style of attention.cu (lane j of a
// warp takes row j of a 32-row tile staged in shared memory, shuffles share
// its scalar, and each lane accumulates head dimensions lane, lane+32, …):
//
//   - attn_bwd_dq: a warp per query row i of one head. A first sweep over
//     the visible keys finds the row's log-sum-exp L_i and D_i with an
//     online softmax (D rescaled alongside the running sum); a second
//     computes P_ij = exp(s_ij − L_i) exactly and accumulates dQ_i. L and D
//     go to scratch memory for the second kernel.
//   - attn_bwd_dkv: a warp per key row j of one key/value head, sweeping the
//     query rows i ≥ j of every query head of its group: dK_j and dV_j are
//     summed in registers, so no atomics are needed and the result does not
//     depend on scheduling.
//
// Neither kernel materialises anything of size t², so any t fits. The
// number of rows per block (warps) is a parameter so the tests can sweep
// it; 0 picks by shape.
#include <math.h>

#include "common.cuh"

namespace {

constexpr int kTile = 32; // rows per shared-memory tile: one per lane

// dot is the dot product of a (in shared memory, read by this lane only)
// and b (broadcast to the warp) over hd elements.
__device__ __forceinline__ float dot(const float *a, const float *b, int hd) {
	float acc = 0.f;
#pragma unroll 4
	for (int d = 0; d < hd; ++d) acc = fmaf(a[d], b[d], acc);
	return acc;
}

template <int DPL> // head dimensions per lane: head_dim ≤ 32·DPL
__global__ void __launch_bounds__(1024) attn_bwd_dq(const float *__restrict__ dO, const float *__restrict__ Q, const float *__restrict__ K,
                            const float *__restrict__ V, float *__restrict__ dQ, float2 *__restrict__ LD, int t,
                            int nh, int nkv, int hd, float scale) {
	extern __shared__ float smem[];
	const int W = blockDim.x >> 5;
	const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
	const int h = blockIdx.y, kvh = h / (nh / nkv);
	const int qc = nh * hd, kc = nkv * hd, ld = hd + 1; // ld pads rows: lane j reads row j conflict-free
	float *Ks = smem;                                  // [kTile][hd+1]
	float *Vs = Ks + kTile * ld;                        // [kTile][hd+1]
	float *Qs = Vs + kTile * ld + warp * 2 * hd;        // this warp's query row
	float *Gs = Qs + hd;                                // and its output gradient

	const int i0 = blockIdx.x * W, i = i0 + warp;
	const bool active = i < t;
	const int kend = min(i0 + W, t); // keys 0..kend-1 are seen by some row of the block

	if (active)
		for (int d = lane; d < hd; d += 32) {
			Qs[d] = Q[(size_t)i * qc + h * hd + d];
			Gs[d] = dO[(size_t)i * qc + h * hd + d];
		}

	// Sweep 1: L_i and D_i, online.
	float m = -INFINITY, l = 0.f, a = 0.f;
	for (int kt = 0; kt < kend; kt += kTile) {
		const int nk = min(kTile, kend - kt);
		__syncthreads(); // the previous tile has been used by every warp
		for (int idx = threadIdx.x; idx < nk * hd; idx += blockDim.x) {
			const int r = idx / hd, d = idx - r * hd;
			const size_t g = (size_t)(kt + r) * kc + kvh * hd + d;
			Ks[r * ld + d] = K[g];
			Vs[r * ld + d] = V[g];
		}
		__syncthreads();
		if (!active || kt > i) continue; // warp-uniform
		float sc = -INFINITY, dp = 0.f;
		if (lane < nk && kt + lane <= i) {
			sc = dot(Ks + lane * ld, Qs, hd) * scale;
			dp = dot(Vs + lane * ld, Gs, hd);
		}
		const float mn = fmaxf(m, warp_max(sc)); // finite: key kt is visible
		const float p = expf(sc - mn);           // 0 for masked keys
		const float alpha = expf(m - mn);        // 0 on the first tile
		l = l * alpha + warp_sum(p);
		a = a * alpha + warp_sum(p * dp);
		m = mn;
	}
	const float L = m + logf(l), D = a / l;
	if (active && lane == 0) LD[(size_t)i * nh + h] = make_float2(L, D);

	// Sweep 2: dQ_i = scale·Σ_j P_ij (dP_ij − D_i) k_j.
	float dq[DPL];
#pragma unroll
	for (int e = 0; e < DPL; ++e) dq[e] = 0.f;
	for (int kt = 0; kt < kend; kt += kTile) {
		const int nk = min(kTile, kend - kt);
		__syncthreads();
		for (int idx = threadIdx.x; idx < nk * hd; idx += blockDim.x) {
			const int r = idx / hd, d = idx - r * hd;
			const size_t g = (size_t)(kt + r) * kc + kvh * hd + d;
			Ks[r * ld + d] = K[g];
			Vs[r * ld + d] = V[g];
		}
		__syncthreads();
		if (!active || kt > i) continue;
		float ds = 0.f;
		if (lane < nk && kt + lane <= i) {
			const float sc = dot(Ks + lane * ld, Qs, hd) * scale;
			const float dp = dot(Vs + lane * ld, Gs, hd);
			ds = expf(sc - L) * (dp - D);
		}
		const int nv = min(nk, i - kt + 1);
		for (int j = 0; j < nv; ++j) {
			const float dsj = __shfl_sync(kFullMask, ds, j);
			const float *kr = Ks + j * ld;
#pragma unroll
			for (int e = 0; e < DPL; ++e) {
				const int d = lane + 32 * e;
				if (d < hd) dq[e] = fmaf(dsj, kr[d], dq[e]);
			}
		}
	}
	if (!active) return;
#pragma unroll
	for (int e = 0; e < DPL; ++e) {
		const int d = lane + 32 * e;
		if (d < hd) dQ[(size_t)i * qc + h * hd + d] = dq[e] * scale;
	}
}

template <int DPL>
__global__ void __launch_bounds__(1024) attn_bwd_dkv(const float *__restrict__ dO, const float *__restrict__ Q, const float *__restrict__ K,
                             const float *__restrict__ V, const float2 *__restrict__ LD, float *__restrict__ dK,
                             float *__restrict__ dV, int t, int nh, int nkv, int hd, float scale) {
	extern __shared__ float smem[];
	const int W = blockDim.x >> 5;
	const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
	const int g = blockIdx.y, group = nh / nkv;
	const int qc = nh * hd, kc = nkv * hd, ld = hd + 1;
	float *Qs = smem;                                // [kTile][hd+1] query rows of the tile
	float *Gs = Qs + kTile * ld;                     // [kTile][hd+1] their output gradients
	float *Ls = Gs + kTile * ld;                     // [kTile] log-sum-exp
	float *Ds = Ls + kTile;                          // [kTile] D
	float *Kj = Ds + kTile + warp * 2 * hd;          // this warp's key row
	float *Vj = Kj + hd;                             // and value row

	const int j0 = blockIdx.x * W, j = j0 + warp;
	const bool active = j < t;
	if (active)
		for (int d = lane; d < hd; d += 32) {
			Kj[d] = K[(size_t)j * kc + g * hd + d];
			Vj[d] = V[(size_t)j * kc + g * hd + d];
		}

	float dk[DPL], dv[DPL];
#pragma unroll
	for (int e = 0; e < DPL; ++e) dk[e] = dv[e] = 0.f;

	for (int h = g * group; h < (g + 1) * group; ++h) {
		for (int it = j0; it < t; it += kTile) { // queries before j0 see no key of the block
			const int ni = min(kTile, t - it);
			__syncthreads(); // the previous tile has been used by every warp
			for (int idx = threadIdx.x; idx < ni * hd; idx += blockDim.x) {
				const int r = idx / hd, d = idx - r * hd;
				const size_t q = (size_t)(it + r) * qc + h * hd + d;
				Qs[r * ld + d] = Q[q];
				Gs[r * ld + d] = dO[q];
			}
			for (int r = threadIdx.x; r < ni; r += blockDim.x) {
				const float2 s = LD[(size_t)(it + r) * nh + h];
				Ls[r] = s.x;
				Ds[r] = s.y;
			}
			__syncthreads();
			if (!active) continue; // warp-uniform
			const int i = it + lane;
			float p = 0.f, ds = 0.f;
			if (lane < ni && i >= j) {
				const float sc = dot(Qs + lane * ld, Kj, hd) * scale;
				const float dp = dot(Gs + lane * ld, Vj, hd);
				p = expf(sc - Ls[lane]);
				ds = p * (dp - Ds[lane]);
			}
			for (int r = max(0, j - it); r < ni; ++r) { // rows i < j contribute nothing
				const float pr = __shfl_sync(kFullMask, p, r);
				const float dsr = __shfl_sync(kFullMask, ds, r);
				const float *qr = Qs + r * ld, *gr = Gs + r * ld;
#pragma unroll
				for (int e = 0; e < DPL; ++e) {
					const int d = lane + 32 * e;
					if (d < hd) {
						dv[e] = fmaf(pr, gr[d], dv[e]);
						dk[e] = fmaf(dsr, qr[d], dk[e]);
					}
				}
			}
		}
	}
	if (!active) return;
#pragma unroll
	for (int e = 0; e < DPL; ++e) {
		const int d = lane + 32 * e;
		if (d < hd) {
			dK[(size_t)j * kc + g * hd + d] = dk[e] * scale;
			dV[(size_t)j * kc + g * hd + d] = dv[e];
		}
	}
}

// set_smem opts a kernel into more than the default 48 KiB of dynamic
// shared memory when it needs it (sm_80: 163 KiB at most, sm_90: 227 KiB).
template <typename F>
cudaError_t set_smem(F *kernel, size_t bytes) {
	if (bytes <= 48 * 1024) return cudaSuccess;
	return cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes);
}

template <int DPL>
int launch_bwd(fn_ctx *ctx, int warps, const float *dO, const float *Q, const float *K, const float *V, float *dQ,
               float *dK, float *dV, float2 *LD, int t, int nh, int nkv, int hd, float scale) {
	const size_t smem_dq = (size_t)(2 * kTile * (hd + 1) + warps * 2 * hd) * sizeof(float);
	const size_t smem_dkv = (size_t)(2 * kTile * (hd + 1) + 2 * kTile + warps * 2 * hd) * sizeof(float);
	FN_CHECK(set_smem(attn_bwd_dq<DPL>, smem_dq));
	FN_CHECK(set_smem(attn_bwd_dkv<DPL>, smem_dkv));
	const unsigned blocks = (unsigned)((t + warps - 1) / warps);
	attn_bwd_dq<DPL><<<dim3(blocks, nh), warps * 32, smem_dq, ctx->stream>>>(dO, Q, K, V, dQ, LD, t, nh, nkv, hd,
	                                                                         scale);
	int err = fn_launched();
	if (err) return err;
	attn_bwd_dkv<DPL><<<dim3(blocks, nkv), warps * 32, smem_dkv, ctx->stream>>>(dO, Q, K, V, LD, dK, dV, t, nh, nkv,
	                                                                            hd, scale);
	return fn_launched();
}

} // namespace

extern "C" int fn_attention_backward(fn_ctx *ctx, int warps, uint64_t dq, uint64_t dk, uint64_t dv, uint64_t dy,
                                     uint64_t q, uint64_t k, uint64_t v, int t, int nh, int nkv, int hd,
                                     float scale) {
	FN_ENTER(ctx);
	if (t == 0 || hd == 0) return 0;
	if (hd > FN_MAX_HEAD_DIM) return FN_ERR_HEAD_DIM;
	if (warps == 0) warps = t >= 128 ? 8 : 4;
	if (warps < 1 || warps > 32) return FN_ERR_BAD_CONFIG;
	if (nh > 65535 || nkv <= 0 || nh % nkv != 0) return FN_ERR_BAD_CONFIG;

	void *buf = nullptr;
	FN_CHECK(fn_scratch_alloc(ctx, &buf, (size_t)t * nh * sizeof(float2)));
	float2 *LD = (float2 *)buf;
	const float *dO = fptr(dy), *Q = fptr(q), *K = fptr(k), *V = fptr(v);
	float *dQ = fptr(dq), *dK = fptr(dk), *dV = fptr(dv);
	const int dpl = (hd + 31) / 32;
	int err;
	if (dpl <= 1)
		err = launch_bwd<1>(ctx, warps, dO, Q, K, V, dQ, dK, dV, LD, t, nh, nkv, hd, scale);
	else if (dpl <= 2)
		err = launch_bwd<2>(ctx, warps, dO, Q, K, V, dQ, dK, dV, LD, t, nh, nkv, hd, scale);
	else if (dpl <= 4)
		err = launch_bwd<4>(ctx, warps, dO, Q, K, V, dQ, dK, dV, LD, t, nh, nkv, hd, scale);
	else
		err = launch_bwd<8>(ctx, warps, dO, Q, K, V, dQ, dK, dV, LD, t, nh, nkv, hd, scale);
	const cudaError_t f = fn_scratch_free(ctx, buf);
	return err ? err : (int)f;
}
