// erase, one launch per batch (grid: x over a sample's elements, y over the samples). Every output
// element is its input element, unless it lies in one of its sample's boxes: then it takes the
// sample's fill value (the one value, or the value of its channel).
//
// itab[s*ITAB + k]: 0 src ptr, 1 dst ptr, 2 elements, 3 ndim, 4 first box (in btab), 5 box count,
//                   6 first fill value (in fill), 7 channel axis (-1: one fill value for all),
//                   8 .. 8+MAX_DIMS-1 the sample's shape (outermost first)
// btab[b*2*MAX_DIMS + 2*d]: start, stop (exclusive) of box b along axis d, clipped to the sample
// fill: every sample's fill values in the sample's type, back to back
//
// Erasing only moves values, so the kernels go by element size (the fill table holds the bit
// patterns of the sample's type): erase_1 for uint8/int8/bool, erase_2, erase_4 (float32 ...),
// erase_8. Samples are contiguous, row-major.

#define MAX_DIMS 6
#define ITAB (8 + MAX_DIMS)

template <typename T>
__device__ void erase_impl(const long long* itab, const long long* btab, const T* fill) {
  const long long* it = itab + (long long)blockIdx.y * ITAB;
  long long p = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (p >= it[2]) return;
  const T* src = (const T*)it[0];
  T* dst = (T*)it[1];
  int ndim = (int)it[3];
  long long nbox = it[5];
  if (nbox > 0) {
    // the element's coordinates, innermost axis varying fastest
    long long coord[MAX_DIMS];
    long long rest = p;
    for (int d = ndim - 1; d >= 0; --d) {
      long long e = it[8 + d];
      coord[d] = rest % e;
      rest /= e;
    }
    const long long* b = btab + it[4] * (2 * MAX_DIMS);
    for (long long k = 0; k < nbox; ++k, b += 2 * MAX_DIMS) {
      bool inside = true;
      for (int d = 0; d < ndim && inside; ++d) inside = coord[d] >= b[2 * d] && coord[d] < b[2 * d + 1];
      if (inside) {
        int ch = (int)it[7];
        dst[p] = fill[it[6] + (ch >= 0 ? coord[ch] : 0)];
        return;
      }
    }
  }
  dst[p] = src[p];
}

#define ERASE(bytes, T)                                                                              \
  extern "C" __global__ void erase_##bytes(const long long* itab, const long long* btab, const T* fill) { \
    erase_impl<T>(itab, btab, fill);                                                                 \
  }

ERASE(1, unsigned char)
ERASE(2, unsigned short)
ERASE(4, unsigned int)
ERASE(8, unsigned long long)
