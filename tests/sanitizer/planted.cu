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

// synccheck: __syncthreads() inside a branch that only some threads of the block take. With 64
// threads and n = 66, the second pass reaches the barrier in threads 0 and 1 only; the others
// skip it and finish (exited threads do not hold a barrier up, so a plain run does not hang).
extern "C" __global__ void plant_divergent_barrier(const float* in, float* out, int n) {
    __shared__ float acc[64];
    int tx = threadIdx.x;
    acc[tx] = 0.0f;
    __syncthreads();
    for (int pass = 0; pass < 2; ++pass) {
        int i = pass * 64 + tx;
        if (i < n) {
            acc[tx] += in[i];
            __syncthreads();   // the planted bug: a barrier in divergent code
        }
    }
    out[tx] = acc[tx];
}
