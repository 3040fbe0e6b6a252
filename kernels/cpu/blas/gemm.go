package blas

// gemmGo is Gemm in plain Go, on one core, for builds without OpenBLAS.
func gemmGo(transB bool, m, n, k int, a []float32, lda int, b []float32, ldb int, c []float32, ldc int) {
	if transB {
		gemmNTGo(m, n, k, a, lda, b, ldb, c, ldc)
		return
	}
	// c_i = Σ_p a[i,p]·b_p, one row of b at a time.
	for i := range m {
		ci := c[i*ldc : i*ldc+n]
		clear(ci)
		for p, x := range a[i*lda : i*lda+k] {
			bp := b[p*ldb : p*ldb+n]
			for j := range ci {
				ci[j] += x * bp[j]
			}
		}
	}
}

// gemmNTGo computes c = a·bᵀ on blocks of 64 rows of b, small enough to
// stay in L2 while every row of a passes over them, with 4×2 (or, for a
// single row of a, 1×4) register tiles of dot products.
func gemmNTGo(m, n, k int, a []float32, lda int, b []float32, ldb int, c []float32, ldc int) {
	const jBlock = 64
	for jb := 0; jb < n; jb += jBlock {
		je := min(jb+jBlock, n)
		i := 0
		for ; i+4 <= m; i += 4 {
			a0, a1, a2, a3 := row(a, i, lda, k), row(a, i+1, lda, k), row(a, i+2, lda, k), row(a, i+3, lda, k)
			c0, c1, c2, c3 := row(c, i, ldc, n), row(c, i+1, ldc, n), row(c, i+2, ldc, n), row(c, i+3, ldc, n)
			j := jb
			for ; j+2 <= je; j += 2 {
				s := dot4x2(a0, a1, a2, a3, row(b, j, ldb, k), row(b, j+1, ldb, k))
				c0[j], c0[j+1] = s[0], s[1]
				c1[j], c1[j+1] = s[2], s[3]
				c2[j], c2[j+1] = s[4], s[5]
				c3[j], c3[j+1] = s[6], s[7]
			}
			for ; j < je; j++ {
				bj := row(b, j, ldb, k)
				c0[j], c1[j], c2[j], c3[j] = dot(a0, bj), dot(a1, bj), dot(a2, bj), dot(a3, bj)
			}
		}
		for ; i < m; i++ {
			ai, ci := row(a, i, lda, k), row(c, i, ldc, n)
			j := jb
			for ; j+4 <= je; j += 4 {
				s := dot1x4(ai, row(b, j, ldb, k), row(b, j+1, ldb, k), row(b, j+2, ldb, k), row(b, j+3, ldb, k))
				copy(ci[j:j+4], s[:])
			}
			for ; j < je; j++ {
				ci[j] = dot(ai, row(b, j, ldb, k))
			}
		}
	}
}

// row is row i of a matrix with leading dimension ld, cut to its n columns.
func row(x []float32, i, ld, n int) []float32 { return x[i*ld : i*ld+n : i*ld+n] }

func dot(x, y []float32) float32 {
	y = y[:len(x)]
	var s0, s1, s2, s3 float32
	p := 0
	for ; p+4 <= len(x); p += 4 {
		s0 += x[p] * y[p]
		s1 += x[p+1] * y[p+1]
		s2 += x[p+2] * y[p+2]
		s3 += x[p+3] * y[p+3]
	}
	for ; p < len(x); p++ {
		s0 += x[p] * y[p]
	}
	return (s0 + s1) + (s2 + s3)
}

func dot4x2(a0, a1, a2, a3, b0, b1 []float32) [8]float32 {
	a1, a2, a3 = a1[:len(a0)], a2[:len(a0)], a3[:len(a0)]
	b0, b1 = b0[:len(a0)], b1[:len(a0)]
	var s00, s01, s10, s11, s20, s21, s30, s31 float32
	for p, x0 := range a0 {
		y0, y1 := b0[p], b1[p]
		x1, x2, x3 := a1[p], a2[p], a3[p]
		s00 += x0 * y0
		s01 += x0 * y1
		s10 += x1 * y0
		s11 += x1 * y1
		s20 += x2 * y0
		s21 += x2 * y1
		s30 += x3 * y0
		s31 += x3 * y1
	}
	return [8]float32{s00, s01, s10, s11, s20, s21, s30, s31}
}

func dot1x4(a, b0, b1, b2, b3 []float32) [4]float32 {
	b0, b1, b2, b3 = b0[:len(a)], b1[:len(a)], b2[:len(a)], b3[:len(a)]
	var s0, s1, s2, s3 float32
	for p, x := range a {
		s0 += x * b0[p]
		s1 += x * b1[p]
		s2 += x * b2[p]
		s3 += x * b3[p]
	}
	return [4]float32{s0, s1, s2, s3}
}
