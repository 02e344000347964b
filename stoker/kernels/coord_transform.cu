// coord_transform, one launch per batch (grid: x over a sample's output elements, y over the
// samples): output element e of sample s is row r = e % out_dim of point p = e / out_dim,
//   out = x0 * M[r][0] + x1 * M[r][1] + ... + M[r][in_dim]        (float32, term by term)
// which is the CPU operator's order of operations (boxes.py, CoordTransform.run_sample): each
// product rounded to float32, then added to the running sum, the translation last. The products
// and sums are written with __fmul_rn / __fadd_rn, which NVCC never contracts into an FMA (an FMA
// rounds once where the CPU rounds twice, and the results would differ in the last bit).
//
// tab[s*CT_COLS + k]: 0 first input element of the sample (in src), 1 first output element (in
//                     dst), 2 output elements, 3 in_dim, 4 out_dim, 5 first float of the sample's
//                     (out_dim, in_dim + 1) matrix in the float table
// The float table follows the n rows (tab + n*CT_COLS, read as float32): the matrices in float32,
// row-major, so that one upload carries the whole batch's plan.
//
// src holds the input in its own type (in_code), converted to float32 as NumPy's astype converts
// (correctly rounded); dst gets the output type (out_code). Integer outputs are rounded halves
// away from zero in float32 (sign(v) * floor(|v| + 0.5f), the CPU's expression) and saturated.

#define CT_COLS 6

enum { CT_F32 = 0, CT_F64, CT_I8, CT_U8, CT_I16, CT_U16, CT_I32, CT_U32, CT_I64, CT_U64 };

__device__ float ct_load(const void* p, int code, long long i) {
  switch (code) {
    case CT_F64: return (float)((const double*)p)[i];
    case CT_I8: return (float)((const signed char*)p)[i];
    case CT_U8: return (float)((const unsigned char*)p)[i];
    case CT_I16: return (float)((const short*)p)[i];
    case CT_U16: return (float)((const unsigned short*)p)[i];
    case CT_I32: return (float)((const int*)p)[i];
    case CT_U32: return (float)((const unsigned int*)p)[i];
    case CT_I64: return (float)((const long long*)p)[i];
    case CT_U64: return (float)((const unsigned long long*)p)[i];
    default: return ((const float*)p)[i];
  }
}

// A whole-valued float (or NaN) as an integer in [lo, hi]: NaN gives 0 (as CUDA's and DALI's
// saturating conversions do); the bounds are compared in double, where they are exact for every
// type up to 32 bits and round to 2^63 / 2^64 for the 64-bit ones (a float at or past those is
// out of range all the same).
template <typename I>
__device__ I ct_saturate(float v, double lo, double hi) {
  if (v != v) return (I)0;
  double d = (double)v;
  if (d <= lo) return (I)lo;
  if (d >= hi) return sizeof(I) == 8 ? (I)(lo < 0 ? 0x7fffffffffffffffLL : 0xffffffffffffffffULL) : (I)hi;
  return (I)d;
}

__device__ void ct_store(void* p, int code, long long i, float v) {
  if (code == CT_F32) { ((float*)p)[i] = v; return; }
  if (code == CT_F64) { ((double*)p)[i] = (double)v; return; }
  float f = floorf(__fadd_rn(fabsf(v), 0.5f));
  float r = v < 0.0f ? -f : (v > 0.0f ? f : (v != v ? v : 0.0f));
  switch (code) {
    case CT_I8: ((signed char*)p)[i] = ct_saturate<signed char>(r, -128.0, 127.0); break;
    case CT_U8: ((unsigned char*)p)[i] = ct_saturate<unsigned char>(r, 0.0, 255.0); break;
    case CT_I16: ((short*)p)[i] = ct_saturate<short>(r, -32768.0, 32767.0); break;
    case CT_U16: ((unsigned short*)p)[i] = ct_saturate<unsigned short>(r, 0.0, 65535.0); break;
    case CT_I32: ((int*)p)[i] = ct_saturate<int>(r, -2147483648.0, 2147483647.0); break;
    case CT_U32: ((unsigned int*)p)[i] = ct_saturate<unsigned int>(r, 0.0, 4294967295.0); break;
    case CT_I64:
      ((long long*)p)[i] = ct_saturate<long long>(r, -9223372036854775808.0, 9223372036854775807.0);
      break;
    case CT_U64:
      ((unsigned long long*)p)[i] = ct_saturate<unsigned long long>(r, 0.0, 18446744073709551615.0);
      break;
  }
}

extern "C" __global__ void coord_transform(const void* src, int in_code, void* dst, int out_code,
                                           const long long* tab, int n) {
  const long long* t = tab + (long long)blockIdx.y * CT_COLS;
  long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (e >= t[2]) return;
  int in_dim = (int)t[3], out_dim = (int)t[4];
  long long p = e / out_dim;
  int r = (int)(e % out_dim);
  const float* m = (const float*)(tab + (long long)n * CT_COLS) + t[5] + (long long)r * (in_dim + 1);
  long long x = t[0] + p * in_dim;
  float acc = __fmul_rn(ct_load(src, in_code, x), m[0]);
  for (int j = 1; j < in_dim; ++j) acc = __fadd_rn(acc, __fmul_rn(ct_load(src, in_code, x + j), m[j]));
  acc = __fadd_rn(acc, m[in_dim]);
  ct_store(dst, out_code, t[1] + e, acc);
}
