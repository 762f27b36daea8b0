// The CUDA threads of one emulated block as fibers (ucontext) run in turn on the calling OS
// thread, shared by cuda_host.h and conv_host.cpp. A barrier (__syncthreads, a warp's exchange)
// makes a fiber yield until every fiber it waits for has arrived. Fibers, not one std::thread per
// CUDA thread: a barrier then costs a context switch instead of waking 256 OS threads, which on a
// 2-core test machine made the emulations most of the CPU suite's time. Interleaving happens only
// at barriers, so a kernel that races between barriers still computes a result here; the GPU
// tests see races. A barrier that some threads never reach (a divergent __syncthreads, which
// hangs the GPU) stops the emulation with a message instead of spinning forever.
#pragma once
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <ucontext.h>
#include <vector>

namespace tl_fibers {

constexpr unsigned MAX_THREADS = 256;
constexpr size_t STACK_BYTES = 256 * 1024;   // the kernels' per-thread arrays with room to spare

struct State {
    ucontext_t scheduler;
    ucontext_t fiber[MAX_THREADS];
    bool done[MAX_THREADS];
    unsigned current = 0;
    unsigned long long progress = 0;          // arrivals and exits: a round without any is a hang
    const std::function<void()>* body = nullptr;
    std::unique_ptr<char[]> stacks;           // allocated once, reused by every block
};

inline State& state() {
    static State s;
    return s;
}

inline void yield() {
    State& s = state();
    swapcontext(&s.fiber[s.current], &s.scheduler);
}

inline void entry() {
    State& s = state();
    const unsigned t = s.current;
    (*s.body)();
    s.done[t] = true;
    ++s.progress;
}   // returns to uc_link: the scheduler

// std::barrier's arrive_and_wait for fibers: the last to arrive opens the next generation and
// goes on; the others yield until it opens.
struct Barrier {
    unsigned expected, arrived = 0, generation = 0;
    explicit Barrier(unsigned n) : expected(n) {}
    void arrive_and_wait() {
        const unsigned mine = generation;
        ++state().progress;
        if (++arrived == expected) {
            arrived = 0;
            ++generation;
            return;
        }
        while (generation == mine) yield();
    }
};

// Run n fibers of `body` until all return; `enter(t)` runs before each switch into fiber t (the
// caller sets its threadIdx there, which is all that tells the fibers apart).
template <class Enter>
inline void run_block(unsigned n, const std::function<void()>& body, Enter enter) {
    State& s = state();
    if (n > MAX_THREADS) {
        std::fprintf(stderr, "emulation: a block of %u threads (at most %u)\n", n, MAX_THREADS);
        std::abort();
    }
    if (!s.stacks) s.stacks.reset(new char[MAX_THREADS * STACK_BYTES]);
    s.body = &body;
    for (unsigned t = 0; t < n; ++t) {
        s.done[t] = false;
        getcontext(&s.fiber[t]);
        s.fiber[t].uc_stack.ss_sp = s.stacks.get() + t * STACK_BYTES;
        s.fiber[t].uc_stack.ss_size = STACK_BYTES;
        s.fiber[t].uc_link = &s.scheduler;
        makecontext(&s.fiber[t], entry, 0);
    }
    for (unsigned left = n; left;) {
        const unsigned long long before = s.progress;
        for (unsigned t = 0; t < n; ++t) {
            if (s.done[t]) continue;
            s.current = t;
            enter(t);
            swapcontext(&s.scheduler, &s.fiber[t]);
            left -= s.done[t];
        }
        if (left && s.progress == before) {
            std::fprintf(stderr, "emulation: %u threads wait at a barrier the others never "
                                 "reach (a divergent __syncthreads or warp exchange hangs the "
                                 "GPU)\n", left);
            std::abort();
        }
    }
}

}  // namespace tl_fibers
