// Test-only kernels, each with one planted bug that one compute-sanitizer tool must report
// (scripts/sanitize.py runs tests/sanitizer/plant.py under each tool before trusting its clean
// runs). None of them faults, hangs or corrupts anything outside its own buffers when run without
// a sanitizer, so the GPU test that runs them plainly is safe. Expects no #defines.

// memcheck: thread n writes one float past the end of an n-float allocation (the driver cudaMallocs
// exactly n floats, so the write lands in the allocation's rounding slack, not in another buffer).
extern "C" __global__ void plant_oob_write(float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i <= n) {   // the planted bug: <= instead of <
        out[i] = 1.0f;
    }
}

// racecheck: every thread writes its shared slot, then thread 0 reads all slots with no
// __syncthreads() between: a read-after-write hazard with the other warps' writes.
extern "C" __global__ void plant_shared_race(const float* in, float* sum_out) {
    __shared__ float slots[128];
    int tx = threadIdx.x;
    slots[tx] = in[tx] + tx;
    // the planted bug: the __syncthreads() that belongs here is missing
    if (tx == 0) {
        float s = 0.0f;
        for (int i = 0; i < 128; ++i) {
            s += slots[i];
        }
        *sum_out = s;
    }
}

// initcheck: reads a buffer that was cudaMalloc'ed and never written (the driver allocates it
// raw, with no memset), into an output that was.
extern "C" __global__ void plant_uninit_read(const float* never_written, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        out[i] = never_written[i];
    }
}

// synccheck: one __syncthreads() reached at two different places: warp 0 waits at the barrier of
// the `if` branch, warp 1 at the one of the `else` branch. Both are bar.sync 0 with the block's full
// count, so a plain run passes them (no hang), but the threads of the block are divergent at a
// barrier. (A branch whose other threads exit instead is not a divergence since Volta: exited
// threads count as arrived, and synccheck said nothing about that form on the H200.)
extern "C" __global__ void plant_divergent_barrier(const float* in, float* out, int n) {
    __shared__ float acc[64];
    int tx = threadIdx.x;
    acc[tx] = in[tx % n];
    if (tx < 32) {
        acc[tx] += 1.0f;
        __syncthreads();   // the planted bug: warp 0's barrier ...
        out[tx] = acc[tx] + acc[63 - tx];
    } else {
        acc[tx] -= 1.0f;
        __syncthreads();   // ... and warp 1's, a different instruction
        out[tx] = acc[tx] * 2.0f + acc[63 - tx];
    }
}
