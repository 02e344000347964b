// normalize's per-sample statistics over a ragged batch in one launch (planned by
// stoker/operators/image/normalize_stats.py): for every sample and every kept entry (the sample's
// shape with the reduced axes set to 1, raveled), the mean of the reduced elements and, with
// need_std, the standard deviation about it. Before this, each sample took ~8 CuPy reductions of
// its own, host time that grew with the batch.
//
// One thread block per (kept entry k = blockIdx.x, sample s = blockIdx.y); blockDim.x is a power
// of two <= BLOCK_MAX. rows[s * ROW + c] (int64):
//   0 src ptr (the sample, contiguous), 1 first output entry, 2 kept entries K, 3 reduced count R,
//   4 kept dims nk, 5 reduced dims nr (each <= MAXD),
//   6 .. kept extents, 6+MAXD .. their element strides,
//   6+2*MAXD .. reduced extents, 6+3*MAXD .. their element strides.
// The dims are runs of the sample's axes of one kind (kept or reduced) merged, row-major, so the
// element of (k, j) lies at offset(k over the kept dims) + offset(j over the reduced dims).
//
// The arithmetic is the CPU's in float64: sum / max(R, 1), then the sum of squared deviations
// about that mean, var = sq / (R - ddof) (0 where R - ddof <= 0), stddev = sqrt(var + eps). The
// _rn intrinsics keep the compiler from contracting d * d + acc into a fused multiply-add, which
// NumPy does not do. Only the summation order differs from NumPy's (a tree here).
#include <cuda_fp16.h>

#define MAXD 8
#define ROW (6 + 4 * MAXD)
#define BLOCK_MAX 256

template <typename In> __device__ __forceinline__ double load(const In* p) { return (double)*p; }
template <> __device__ __forceinline__ double load<__half>(const __half* p) { return (double)__half2float(*p); }

// The element offset of the index-th entry of the row-major grid ext[0..n) (element strides stride).
// The outermost coordinate is what is left of index, so one dim (the common case) costs no
// division; no dims (nothing kept) is the one entry 0.
__device__ __forceinline__ long long grid_offset(long long index, const long long* ext, const long long* stride,
                                                 int n) {
  long long off = 0;
  for (int d = n - 1; d > 0; --d) {
    off += (index % ext[d]) * stride[d];
    index /= ext[d];
  }
  return n > 0 ? off + index * stride[0] : 0;
}

// The block's total of every thread's v, returned to every thread (a shared-memory tree).
__device__ double block_sum(double v, double* shared) {
  shared[threadIdx.x] = v;
  __syncthreads();
  for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) shared[threadIdx.x] = __dadd_rn(shared[threadIdx.x], shared[threadIdx.x + s]);
    __syncthreads();
  }
  double total = shared[0];
  __syncthreads();  // shared is written again by the next call
  return total;
}

template <typename In>
__device__ void ragged_stats_impl(const long long* rows, double* mean, double* stddev, int need_std, long long ddof,
                                  double eps) {
  __shared__ double shared[BLOCK_MAX];
  const long long* r = rows + (long long)blockIdx.y * ROW;
  long long k = blockIdx.x;
  if (k >= r[2]) return;  // past this sample's entries: the whole block leaves, no barrier is split
  const long long count = r[3];
  const int nr = (int)r[5];
  const In* base = (const In*)r[0] + grid_offset(k, r + 6, r + 6 + MAXD, (int)r[4]);
  const long long* rext = r + 6 + 2 * MAXD;
  const long long* rstride = r + 6 + 3 * MAXD;
  double acc = 0.0;
  for (long long j = threadIdx.x; j < count; j += blockDim.x)
    acc = __dadd_rn(acc, load<In>(base + grid_offset(j, rext, rstride, nr)));
  const double m = block_sum(acc, shared) / (double)(count > 1 ? count : 1);
  const long long at = r[1] + k;
  if (threadIdx.x == 0) mean[at] = m;
  if (!need_std) return;
  acc = 0.0;
  for (long long j = threadIdx.x; j < count; j += blockDim.x) {
    double d = __dsub_rn(load<In>(base + grid_offset(j, rext, rstride, nr)), m);
    acc = __dadd_rn(acc, __dmul_rn(d, d));
  }
  const double sq = block_sum(acc, shared);
  if (threadIdx.x == 0) {
    const long long denom = count - ddof;
    const double var = denom > 0 ? sq / (double)denom : 0.0;
    stddev[at] = sqrt(var + eps);
  }
}

#define RAGGED_STATS(suffix, In)                                                                   \
  extern "C" __global__ void ragged_stats_##suffix(const long long* rows, double* mean, double* stddev, \
                                                   int need_std, long long ddof, double eps) {     \
    ragged_stats_impl<In>(rows, mean, stddev, need_std, ddof, eps);                                \
  }

RAGGED_STATS(u8, unsigned char)
RAGGED_STATS(i8, signed char)
RAGGED_STATS(u16, unsigned short)
RAGGED_STATS(i16, short)
RAGGED_STATS(i32, int)
RAGGED_STATS(f16, __half)
RAGGED_STATS(f32, float)
RAGGED_STATS(f64, double)
