// Poisoning of device blocks (engine/runtime/poison.py): while poisoning is on, the exact-size
// cache of engine/runtime/allocator.py fills every block it hands out with a float32 signalling
// NaN whose payload no computation produces, so an output a kernel leaves unwritten is seen.
//
// Compiled by engine/runtime/loader.py with OPTIONS; no #defines expected. Sizes are bytes and
// 64-bit (a block may exceed 4 GiB); blocks come from cudaMalloc, so they are 4-byte aligned.
//
//   tl_poison_fill(base, bytes, pattern)
//       every whole 4-byte word of [base, base + bytes) = pattern; the byte tail (bytes % 4) holds
//       the pattern's first bytes in memory order (little-endian), as a partial word would.

extern "C" __global__ void tl_poison_fill(unsigned char* __restrict__ base,
                                          unsigned long long bytes, unsigned pattern) {
    const unsigned long long words = bytes >> 2;
    unsigned* __restrict__ w = reinterpret_cast<unsigned*>(base);
    const unsigned long long stride = (unsigned long long)blockDim.x * gridDim.x;
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
         i < words; i += stride) {
        w[i] = pattern;
    }
    if (blockIdx.x == 0 && threadIdx.x == 0) {
        for (unsigned j = 0; j < (unsigned)(bytes & 3ull); ++j) {
            base[(words << 2) + j] = (unsigned char)(pattern >> (8u * j));
        }
    }
}
