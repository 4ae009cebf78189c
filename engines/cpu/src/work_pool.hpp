// A small process-wide pool of worker threads for calls whose work is short (the SDPA forward:
// decode and prefill alike).
//
// Why not an OpenMP parallel for: its join waits for every thread of the team, and a thread the
// OS has not scheduled yet (the other cores busy with another process, or with another runtime's
// spinning threads, as in a torch model on few cores) holds the caller for a whole scheduler
// time slice: 4-10 ms were measured on a loaded 2-core machine for calls whose work takes 10 us.
// Here the caller takes items itself from the same counter as the workers and only waits for
// items a worker has already claimed; a worker that wakes late finds nothing left to do. So a
// call is never slower than running it alone on the calling thread, plus about a microsecond.
//
// Workers spin for a short while after a job (back-to-back calls find them awake) and then sleep.
// Waking a sleeping worker is itself expensive where cores idle in a hypervisor (2-20 us in the
// caller's futex call on the 2-vCPU development VM), and the woken thread is often placed on the
// caller's own core, stalling it (a worker that finds itself there moves off it: work_pool.cpp).
// So only calls with enough work wake sleepers (`wake`); others use the workers that are awake,
// else run alone. Workers are never joined (the state is deliberately leaked, so no destructor runs under a waiting
// thread at exit). One job runs at a time: a caller that finds the pool busy (another thread of
// the application executing at the same time) runs its items alone.
#pragma once

#include <cstdint>

namespace hipdnn_cpu
{

// Runs fn(ctx, item, slice) for every item < total, on the calling thread (slice 0) and at most
// width - 1 workers (slices 1 .. width - 1; each slice is used by one thread at a time); wakes
// sleeping workers only when `wake`. Returns when every item has run.
void pool_run(int64_t total, int width, bool wake, void (*fn)(void* ctx, int64_t item, int slice), void* ctx);

template <class F>
void pool_for(int64_t total, int width, bool wake, F& f)
{
    pool_run(
        total, width, wake, [](void* c, int64_t item, int slice) { (*static_cast<F*>(c))(item, slice); }, &f);
}

} // namespace hipdnn_cpu
