// Pieces the tiled products share (matmul.cu's forward sgemm_nt and
// gemm.cu's training products): the numbering of launch configurations and
// the staging of operand slabs into shared memory.
#pragma once

#include "common.cuh"

namespace {

enum { kAuto = 0, kGemv = 1, kTile32 = 2, kTile64 = 3, kTile128 = 4 };

template <int N>
__device__ __forceinline__ void load_shared(const float *p, float *out) {
	if constexpr (N == 4) {
		float4 v = *reinterpret_cast<const float4 *>(p);
		out[0] = v.x, out[1] = v.y, out[2] = v.z, out[3] = v.w;
	} else if constexpr (N == 2) {
		float2 v = *reinterpret_cast<const float2 *>(p);
		out[0] = v.x, out[1] = v.y;
	} else {
		out[0] = p[0];
	}
}

// load_kinner copies rows [r0, r0+ROWS) × columns [k0, k0+BK) of the R×K
// row-major matrix G (K innermost) into S transposed (S[c][r], leading
// dimension ROWS+4), with zeros outside the matrix. VEC reads float4s along
// K and needs K%4 == 0 and a 16-byte aligned G.
template <int ROWS, int BK, int NT, bool VEC>
__device__ __forceinline__ void load_kinner(float *__restrict__ S, const float *__restrict__ G, int R, int K,
                                            int r0, int k0, int tid) {
	constexpr int LD = ROWS + 4;
	if constexpr (VEC) {
		constexpr int V = ROWS * BK / 4;
		static_assert(V % NT == 0, "tile not divisible among threads");
#pragma unroll
		for (int i = 0; i < V / NT; ++i) {
			const int e = tid + i * NT;
			const int r = e / (BK / 4), c = (e % (BK / 4)) * 4;
			const int gr = r0 + r, gc = k0 + c;
			float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
			if (gr < R && gc < K) v = __ldg(reinterpret_cast<const float4 *>(G + (size_t)gr * K + gc));
			S[(c + 0) * LD + r] = v.x;
			S[(c + 1) * LD + r] = v.y;
			S[(c + 2) * LD + r] = v.z;
			S[(c + 3) * LD + r] = v.w;
		}
	} else {
		constexpr int E = ROWS * BK;
		static_assert(E % NT == 0, "tile not divisible among threads");
#pragma unroll
		for (int i = 0; i < E / NT; ++i) {
			const int e = tid + i * NT;
			const int r = e / BK, c = e % BK;
			const int gr = r0 + r, gc = k0 + c;
			S[c * LD + r] = (gr < R && gc < K) ? __ldg(G + (size_t)gr * K + gc) : 0.f;
		}
	}
}

} // namespace
