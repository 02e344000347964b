// Batched window copy (pad, slice): every output element is the input element at
// (output index + a per-sample offset on each dim), or a fill value where that index falls
// outside the input. One launch per batch: blockIdx.y is the sample, x runs over its output
// elements (the output is C-contiguous; the input may have any element strides).
//
// Only the element size matters to a copy, so there is one kernel per size (1, 2, 4, 8 bytes)
// and every dtype of that size (uint8/int8/bool, int16/uint16/float16, int32/uint32/float32,
// int64/uint64/float64) goes through it; the host casts the fill values to the output dtype and
// passes their bits.
//
// tab[s*32 + k] (int64), dims right-aligned (the innermost dim is dim 5; dims 0 .. 5-nd are unused):
//   0 src ptr, 1 dst ptr, 2 output element count, 3 nd (dims used, 0..6),
//   4 first fill value of the sample in `fills`, 5 the dim whose output coordinate picks the fill
//   value (per-channel fill) or -1 (one fill value),
//   6..11 output extents, 12..17 input extents, 18..23 input strides (elements),
//   24..29 offsets (input index of output index 0, may be negative or past the end).
#define WC_MAXD 6
#define WC_COLS 32

template <typename T>
__device__ __forceinline__ void window_copy_impl(const long long* tab, const T* fills) {
  const long long* t = tab + (long long)blockIdx.y * WC_COLS;
  long long p = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (p >= t[2]) return;
  const long long* oext = t + 6;
  const long long* iext = t + 12;
  const long long* istr = t + 18;
  const long long* off = t + 24;
  int nd = (int)t[3];
  int fdim = (int)t[5];
  long long rem = p, src = 0, ch = 0;
  bool inside = true;
  // Innermost dim first: p's coordinates in the output are its mixed-radix digits.
  for (int d = WC_MAXD - 1; d >= WC_MAXD - nd; --d) {
    long long c = rem % oext[d];
    rem /= oext[d];
    if (d == fdim) ch = c;
    long long i = c + off[d];
    if (i < 0 || i >= iext[d]) inside = false;
    src += i * istr[d];
  }
  T* dst = (T*)t[1];
  if (inside) {
    dst[p] = ((const T*)t[0])[src];
  } else {
    dst[p] = fills[t[4] + ch];
  }
}

#define WINDOW_COPY(size, T)                                                                   \
  extern "C" __global__ void window_copy_##size(const long long* tab, const T* fills) {       \
    window_copy_impl<T>(tab, fills);                                                           \
  }

WINDOW_COPY(1, unsigned char)
WINDOW_COPY(2, unsigned short)
WINDOW_COPY(4, unsigned int)
WINDOW_COPY(8, unsigned long long)
