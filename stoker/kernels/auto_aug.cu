// stoker.auto_aug's own steps (auto_aug/_ops.py) on GPU batches of uint8 images (HWC or HW),
// every kernel one launch per batch: grid y over the samples, grid x over a sample's pixels
// (threads loop over them with the grid's stride), 256 threads a block.
//
// itab[s*ITAB + k]: 0 src ptr (contiguous HWC), 1 dst ptr (contiguous HWC), 2 pixels (H * W),
//                   3 channels C, 4 the sample's first histogram bin / table entry (C * 256 of
//                   them, channel by channel), 5 the sample's parameter ptr (type `ptype`, see
//                   param_*), 6 H, 7 W
//
// Histogram ops (equalize, auto_contrast, contrast), three launches and no host sync:
//   aa_hist    per-sample per-channel histograms, uint32 (n, C, 256), zeroed by the host's memset;
//              each block counts its pixels in shared memory, then adds its nonzero bins
//   aa_tables  each sample's lookup tables from its histogram, one block of 256 threads (one per
//              value) per sample and channel (contrast: per sample, its 3 channels together),
//              with the CPU operator's arithmetic step by step (_ops.py's table helpers)
//   aa_lut     dst = table[channel][src]
// Pointwise ops with a per-sample parameter, one launch: aa_point (solarize, solarize_add).
// Sharpness: aa_filter, the 3x3 correlation with the sample's kernel (reflect-101 border).
//
// The __f*_rn / __d*_rn intrinsics keep every float operation rounded on its own, in the CPU's
// order (the compiler would otherwise fuse multiply-adds).

#define ITAB 8
#define OP_EQUALIZE 0
#define OP_AUTO_CONTRAST 1
#define OP_CONTRAST 2
#define OP_SOLARIZE 0
#define OP_SOLARIZE_ADD 1

// ---- parameters, by NumPy type: 0 u8, 1 i8, 2 u16, 3 i16, 4 u32, 5 i32, 6 u64, 7 i64, 8 f32,
// 9 f64, 10 bool ---------------------------------------------------------------------------------

// element k as a double (what NumPy compares a float32 value with: exact for every type but
// 64-bit integers beyond 2^53, which round as NumPy's float64 conversion rounds them)
__device__ __forceinline__ double param_f64(const void* p, long long k, int t) {
  switch (t) {
    case 0: return (double)((const unsigned char*)p)[k];
    case 1: return (double)((const signed char*)p)[k];
    case 2: return (double)((const unsigned short*)p)[k];
    case 3: return (double)((const short*)p)[k];
    case 4: return (double)((const unsigned int*)p)[k];
    case 5: return (double)((const int*)p)[k];
    case 6: return __ull2double_rn(((const unsigned long long*)p)[k]);
    case 7: return __ll2double_rn(((const long long*)p)[k]);
    case 8: return (double)((const float*)p)[k];
    case 9: return ((const double*)p)[k];
    default: return ((const unsigned char*)p)[k] ? 1.0 : 0.0;
  }
}

// element k as np.float32(value) gives it (one rounding, from the value's own type)
__device__ __forceinline__ float param_f32(const void* p, long long k, int t) {
  switch (t) {
    case 4: return __uint2float_rn(((const unsigned int*)p)[k]);
    case 5: return __int2float_rn(((const int*)p)[k]);
    case 6: return __ull2float_rn(((const unsigned long long*)p)[k]);
    case 7: return __ll2float_rn(((const long long*)p)[k]);
    case 8: return ((const float*)p)[k];
    case 9: return __double2float_rn(((const double*)p)[k]);
    default: return (float)param_f64(p, k, t);  // exact
  }
}

// element 0 as .astype(np.uint8) gives it: integers wrap (two's complement), floats truncate
// towards zero (NumPy's C cast; for values outside [0, 256) C leaves it open, see gpu_ops.py)
__device__ __forceinline__ unsigned char param_u8(const void* p, int t) {
  switch (t) {
    case 0: case 1: return ((const unsigned char*)p)[0];
    case 2: case 3: return (unsigned char)((const unsigned short*)p)[0];
    case 4: case 5: return (unsigned char)((const unsigned int*)p)[0];
    case 6: case 7: return (unsigned char)((const unsigned long long*)p)[0];
    case 8: return (unsigned char)(long long)((const float*)p)[0];
    case 9: return (unsigned char)(long long)((const double*)p)[0];
    default: return ((const unsigned char*)p)[0] ? 1 : 0;
  }
}

// convert(x, uint8) of stoker/operators/tensor/basic.py: the float32 value as a float64, halves
// away from zero, saturated (NaN: 0, as NumPy's cast gives it on x86)
__device__ __forceinline__ unsigned char convert_u8(float f) {
  double d = (double)f;
  d = trunc(__dadd_rn(d, copysign(0.5, d)));
  return (unsigned char)fmin(fmax(d, 0.0), 255.0);
}

// ---- histograms -----------------------------------------------------------------------------------

// hist: every sample's C * 256 bins from itab[4]; `in_shared`: count in dynamic shared memory
// (C * 256 uint32 of the batch's largest C) before adding to hist, else atomics on hist itself.
extern "C" __global__ void aa_hist(const long long* itab, unsigned int* hist, int in_shared) {
  extern __shared__ unsigned int counts[];
  const long long* it = itab + (long long)blockIdx.y * ITAB;
  const long long P = it[2];
  const int C = (int)it[3];
  if ((long long)blockIdx.x * blockDim.x >= P) return;  // the whole block: no pixel of its own
  const unsigned char* src = (const unsigned char*)it[0];
  unsigned int* h = hist + it[4];
  const long long step = (long long)gridDim.x * blockDim.x;
  if (!in_shared) {
    for (long long p = (long long)blockIdx.x * blockDim.x + threadIdx.x; p < P; p += step)
      for (int c = 0; c < C; ++c) atomicAdd(&h[c * 256 + src[p * C + c]], 1u);
    return;
  }
  const int bins = C * 256;
  for (int k = threadIdx.x; k < bins; k += blockDim.x) counts[k] = 0u;
  __syncthreads();
  for (long long p = (long long)blockIdx.x * blockDim.x + threadIdx.x; p < P; p += step)
    for (int c = 0; c < C; ++c) atomicAdd(&counts[c * 256 + src[p * C + c]], 1u);
  __syncthreads();
  for (int k = threadIdx.x; k < bins; k += blockDim.x) {
    const unsigned int v = counts[k];
    if (v) atomicAdd(&h[k], v);
  }
}

// ---- tables -------------------------------------------------------------------------------------

// One block of 256 threads per (channel blockIdx.x, sample blockIdx.y), thread v: entry v.
// equalize (OpenCV's equalizeHist): i0 the first nonzero bin; a channel of one value maps to it;
// else scale = 255.f / (float)(pixels - hist[i0]), entries up to i0 map to 0 and entry v > i0 to
// saturate(rint((float)(cum[v] - hist[i0]) * scale)), cum the inclusive cumulative histogram.
__device__ void equalize_table(const long long* it, const unsigned int* h, unsigned char* T) {
  __shared__ unsigned int cum[256];
  __shared__ int first;
  const int v = threadIdx.x;
  const unsigned int count = h[v];
  cum[v] = count;
  if (v == 0) first = 256;
  __syncthreads();
  if (count) atomicMin(&first, v);
  for (int d = 1; d < 256; d <<= 1) {  // inclusive scan (exact: integers)
    __syncthreads();
    const unsigned int add = v >= d ? cum[v - d] : 0u;
    __syncthreads();
    cum[v] += add;
  }
  __syncthreads();
  const int i0 = first;
  if (i0 > 255) {  // no pixels (the host keeps empty samples off the kernels)
    T[v] = 0;
    return;
  }
  const long long total = it[2];
  const long long base = (long long)h[i0];
  if (base == total) {
    T[v] = (unsigned char)i0;
    return;
  }
  if (v <= i0) {
    T[v] = 0;
    return;
  }
  const float scale = __fdiv_rn(255.f, __ll2float_rn(total - base));
  const int r = __float2int_rn(__fmul_rn(__ll2float_rn((long long)cum[v] - base), scale));
  T[v] = (unsigned char)min(max(r, 0), 255);
}

// auto_contrast: lo, hi the first and last nonzero bins; spread = (float)(hi - lo); where spread > 0,
// entry v = convert((float)(uint8)(v - lo) * (255.f / spread)), else convert((float)v * 1.f) = v.
__device__ void auto_contrast_table(const unsigned int* h, unsigned char* T) {
  __shared__ int lo, hi;
  const int v = threadIdx.x;
  if (v == 0) {
    lo = 256;
    hi = -1;
  }
  __syncthreads();
  if (h[v]) {
    atomicMin(&lo, v);
    atomicMax(&hi, v);
  }
  __syncthreads();
  if (hi < 0) {  // no pixels
    T[v] = (unsigned char)v;
    return;
  }
  const float spread = (float)(hi - lo);
  float scale = 1.f;
  int shifted = v;
  if (spread > 0.f) {
    scale = __fdiv_rn(255.f, spread);
    shifted = (v - lo) & 255;
  }
  T[v] = convert_u8(__fmul_rn((float)shifted, scale));
}

// contrast (3 channels): sums[c] = sum of v * hist[c][v]; means[c] = (float)(sums[c] / pixels) (a
// double division); center = (float)(((double)(means[0] * l0) + (double)(means[1] * l1)) +
// (double)(means[2] * l2)); entry v = convert(center + ((float)v - center) * factor), the same
// table for the 3 channels.
__device__ void contrast_table(const long long* it, const unsigned int* h, unsigned char* T, int ptype,
                               float l0, float l1, float l2) {
  __shared__ unsigned long long sums[3];
  __shared__ float center;
  const int v = threadIdx.x;
  if (v < 3) sums[v] = 0ull;
  __syncthreads();
  for (int c = 0; c < 3; ++c) {
    const unsigned long long count = h[c * 256 + v];
    if (count) atomicAdd(&sums[c], count * (unsigned long long)v);
  }
  __syncthreads();
  if (v == 0) {
    const double pixels = (double)it[2];
    const float luma[3] = {l0, l1, l2};
    double acc = 0.0;
    for (int c = 0; c < 3; ++c) {
      const float mean = __double2float_rn(__ddiv_rn(__ull2double_rn(sums[c]), pixels));
      const double w = (double)__fmul_rn(mean, luma[c]);
      acc = c == 0 ? w : __dadd_rn(acc, w);
    }
    center = __double2float_rn(acc);
  }
  __syncthreads();
  const float factor = param_f32((const void*)it[5], 0, ptype);
  const unsigned char t = convert_u8(__fadd_rn(center, __fmul_rn(__fsub_rn((float)v, center), factor)));
  for (int c = 0; c < 3; ++c) T[c * 256 + v] = t;
}

// grid (channels of the batch's widest sample, or 1 for contrast; samples), block 256
extern "C" __global__ void aa_tables(const long long* itab, const unsigned int* hist, unsigned char* tables, int op,
                                     int ptype, float l0, float l1, float l2) {
  const long long* it = itab + (long long)blockIdx.y * ITAB;
  const int c = blockIdx.x;
  if (c >= (int)it[3]) return;  // the whole block (a sample with fewer channels)
  const long long first = it[4] + (long long)c * 256;
  if (op == OP_EQUALIZE) {
    equalize_table(it, hist + first, tables + first);
  } else if (op == OP_AUTO_CONTRAST) {
    auto_contrast_table(hist + first, tables + first);
  } else {
    contrast_table(it, hist + first, tables + first, ptype, l0, l1, l2);
  }
}

// ---- applying -----------------------------------------------------------------------------------

// dst[p, c] = tables[itab[4] + c * 256 + src[p, c]]
extern "C" __global__ void aa_lut(const long long* itab, const unsigned char* tables) {
  const long long* it = itab + (long long)blockIdx.y * ITAB;
  const long long P = it[2];
  const int C = (int)it[3];
  const unsigned char* src = (const unsigned char*)it[0];
  unsigned char* dst = (unsigned char*)it[1];
  const unsigned char* T = tables + it[4];
  const long long step = (long long)gridDim.x * blockDim.x;
  for (long long p = (long long)blockIdx.x * blockDim.x + threadIdx.x; p < P; p += step) {
    const long long e = p * C;
    for (int c = 0; c < C; ++c) dst[e + c] = T[c * 256 + src[e + c]];
  }
}

// solarize: x if (double)x < threshold else 255 - x (NumPy compares the float32 values with the
// parameter's type: exactly so); solarize_add: x + (uint8)shift (wrapping) if x < 128 else x.
extern "C" __global__ void aa_point(const long long* itab, int op, int ptype) {
  const long long* it = itab + (long long)blockIdx.y * ITAB;
  const long long E = it[2] * it[3];
  const unsigned char* src = (const unsigned char*)it[0];
  unsigned char* dst = (unsigned char*)it[1];
  const void* param = (const void*)it[5];
  const long long step = (long long)gridDim.x * blockDim.x;
  long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (e >= E) return;
  if (op == OP_SOLARIZE) {
    const double threshold = param_f64(param, 0, ptype);
    for (; e < E; e += step) {
      const unsigned char x = src[e];
      dst[e] = (double)x < threshold ? x : (unsigned char)(255 - x);
    }
  } else {
    const unsigned char shift = param_u8(param, ptype);
    for (; e < E; e += step) {
      const unsigned char x = src[e];
      dst[e] = x < 128 ? (unsigned char)(x + shift) : x;
    }
  }
}

// ---- sharpness: the 3x3 filter ------------------------------------------------------------------

// OpenCV's BORDER_REFLECT_101 for an index at most one outside [0, n)
__device__ __forceinline__ long long reflect101(long long i, long long n) {
  if (n == 1) return 0;
  if (i < 0) return -i;
  if (i >= n) return 2 * n - 2 - i;
  return i;
}

// dst[y, x, c] = saturate(rint(sum of k[i][j] * src[y + i - 1, x + j - 1, c])), the float32 sum
// taken tap by tap, row by row, from 0, as OpenCV's filter2D takes it: its vectorised loop runs over
// a row's W * C values `lanes` at a time with one fused multiply-add per tap, and the values past
// the last whole vector (e = x * C + c >= (W * C / lanes) * lanes) in its scalar loop, a product
// then a sum per tap. `lanes` comes from a probe of the host's OpenCV (gpu_ops.py; 1: every value
// fused, a huge value: none). The kernel: 9 values of the parameter's type from itab[5], as
// np.float32 gives them.
extern "C" __global__ void aa_filter(const long long* itab, int ptype, long long lanes) {
  const long long* it = itab + (long long)blockIdx.y * ITAB;
  const long long P = it[2];
  long long p = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (p >= P) return;
  const int C = (int)it[3];
  const long long H = it[6], W = it[7];
  const unsigned char* src = (const unsigned char*)it[0];
  unsigned char* dst = (unsigned char*)it[1];
  const void* param = (const void*)it[5];
  float k[9];
  for (int j = 0; j < 9; ++j) k[j] = param_f32(param, j, ptype);
  const long long vector_end = (W * C / lanes) * lanes;
  const long long step = (long long)gridDim.x * blockDim.x;
  for (; p < P; p += step) {
    const long long y = p / W, x = p % W;
    long long rows[3], cols[3];
    for (int d = 0; d < 3; ++d) {
      rows[d] = reflect101(y + d - 1, H) * W;
      cols[d] = reflect101(x + d - 1, W);
    }
    for (int c = 0; c < C; ++c) {
      const bool fused = x * C + c < vector_end;
      float acc = 0.f;
      for (int i = 0; i < 3; ++i)
        for (int j = 0; j < 3; ++j) {
          const float v = (float)src[(rows[i] + cols[j]) * C + c];
          acc = fused ? __fmaf_rn(v, k[i * 3 + j], acc) : __fadd_rn(acc, __fmul_rn(v, k[i * 3 + j]));
        }
      dst[p * C + c] = (unsigned char)fminf(fmaxf(rintf(acc), 0.f), 255.f);
    }
  }
}
