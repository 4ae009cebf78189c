// The work pool of work_pool.hpp.
//
// Protocol. One 64-bit ticket holds (generation << 32 | next item). A caller
// publishing a job first closes the ticket (next item = kClosed, new
// generation: no claim of the old job can succeed from then on), writes the
// job's fields, zeroes `done`, then opens the ticket (next item 0, release).
// Anyone claiming reads the ticket (acquire), then the fields, then claims
// item i by a compare-exchange of exactly the ticket it read: success proves
// the ticket did not change in between, so the fields read belong to that
// job (a new job would have closed the ticket first). The item runs, then
// `done` counts it; the caller, once no item is left to claim, waits for
// `done` to reach the total, i.e. only for items someone is running.

#include "work_pool.hpp"

#include "cpu_kernels.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <new>
#include <pthread.h>
#include <sched.h>
#include <system_error>
#include <thread>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define HIPDNN_POOL_PAUSE() _mm_pause()
#else
#define HIPDNN_POOL_PAUSE() ((void)0)
#endif

namespace hipdnn_cpu
{
namespace
{

constexpr uint64_t kClosed = 0xffffffffu;
constexpr uint64_t kItemMask = 0xffffffffu;
// How long an idle worker keeps looking for the next job before it sleeps: long enough for
// back-to-back calls, short enough not to hold a core that the application's other threads (a
// model's matmuls between two attention calls) want.
constexpr auto kSpin = std::chrono::microseconds(50);

struct Pool
{
    std::atomic<uint64_t> ticket{0};
    std::atomic<void (*)(void*, int64_t, int)> fn{nullptr};
    std::atomic<void*> ctx{nullptr};
    std::atomic<int64_t> total{0};
    std::atomic<int> width{0};
    std::atomic<int64_t> done{0};
    std::mutex caller; // one job at a time
    std::mutex m;      // with cv: sleeping workers
    std::condition_variable cv;
    std::atomic<int> sleepers{0};
    std::atomic<int> caller_cpu{-1}; // where the caller that last woke the workers runs
    std::mutex grow;               // starting workers
    std::atomic<int> workers{0};   // started
};

// Never destroyed: workers may wait on it at exit. A child process made by fork() has none of the
// workers (and maybe a mutex some thread held at the fork), so it starts a fresh pool.
std::atomic<Pool*> g_pool{nullptr};

void fresh_pool_after_fork()
{
    g_pool.store(new(std::nothrow) Pool, std::memory_order_relaxed);
}

Pool* pool()
{
    static const bool registered = [] {
        g_pool.store(new(std::nothrow) Pool, std::memory_order_relaxed);
        pthread_atfork(nullptr, nullptr, fresh_pool_after_fork);
        return true;
    }();
    (void)registered;
    return g_pool.load(std::memory_order_relaxed);
}

// Claims and runs items of the job on the ticket until none is left (or the job is not this
// slice's to help with).
void claim(Pool& p, int slice)
{
    for(;;)
    {
        uint64_t v = p.ticket.load(std::memory_order_acquire);
        const uint64_t item = v & kItemMask;
        if(item == kClosed)
            return;
        auto* fn = p.fn.load(std::memory_order_relaxed);
        void* ctx = p.ctx.load(std::memory_order_relaxed);
        const int64_t total = p.total.load(std::memory_order_relaxed);
        const int width = p.width.load(std::memory_order_relaxed);
        if(slice >= width || static_cast<int64_t>(item) >= total)
            return;
        // Pairs with the caller's release fence: fields of a newer job mean the CAS sees it closed.
        std::atomic_thread_fence(std::memory_order_acquire);
        if(!p.ticket.compare_exchange_weak(v, v + 1, std::memory_order_acq_rel, std::memory_order_acquire))
            continue;
        fn(ctx, static_cast<int64_t>(item), slice);
        p.done.fetch_add(1, std::memory_order_release);
    }
}

// A woken worker is often placed on the core of the thread that woke it, which then waits for
// it (50-200 us were measured): moved off that core, it runs beside the caller. Its mask is the
// process's CPUs at the pool's start without the caller's; it is only changed on such a collision.
#if defined(__linux__)
cpu_set_t g_cpus; // the process's CPUs when the pool started
bool g_have_cpus = false;

void keep_off(int cpu)
{
    if(!g_have_cpus || cpu < 0 || cpu >= CPU_SETSIZE || sched_getcpu() != cpu)
        return;
    cpu_set_t m = g_cpus;
    CPU_CLR(cpu, &m);
    if(CPU_COUNT(&m) > 0)
        pthread_setaffinity_np(pthread_self(), sizeof(m), &m); // best effort
}
int current_cpu()
{
    return sched_getcpu();
}
#else
void keep_off(int) {}
int current_cpu()
{
    return -1;
}
#endif

bool fresh(uint64_t v, uint64_t gen)
{
    return (v >> 32) != gen && (v & kItemMask) != kClosed;
}

void worker(Pool* pp, int slice)
{
    Pool& p = *pp;
    uint64_t gen = p.ticket.load(std::memory_order_acquire) >> 32;
    for(;;)
    {
        uint64_t v = p.ticket.load(std::memory_order_acquire);
        if(!fresh(v, gen))
        {
            const auto until = std::chrono::steady_clock::now() + kSpin;
            for(int i = 0;; ++i)
            {
                HIPDNN_POOL_PAUSE();
                v = p.ticket.load(std::memory_order_acquire);
                if(fresh(v, gen))
                    break;
                if((i & 63) == 63 && std::chrono::steady_clock::now() > until)
                {
                    std::unique_lock<std::mutex> lk(p.m);
                    // seq_cst with the caller's ticket store and sleepers load: either it sees this
                    // sleeper, or this sleeper sees its job.
                    p.sleepers.fetch_add(1, std::memory_order_seq_cst);
                    p.cv.wait(lk, [&] {
                        v = p.ticket.load(std::memory_order_seq_cst);
                        return fresh(v, gen);
                    });
                    p.sleepers.fetch_sub(1, std::memory_order_relaxed);
                    keep_off(p.caller_cpu.load(std::memory_order_relaxed));
                    break;
                }
            }
        }
        gen = v >> 32;
        claim(p, slice);
    }
}

// Starts workers up to `want` (slices 1..want); returns how many there are.
int ensure_workers(Pool& p, int want)
{
    int have = p.workers.load(std::memory_order_acquire);
    if(have >= want || !p.grow.try_lock())
        return have;
#if defined(__linux__)
    if(have == 0)
        g_have_cpus = sched_getaffinity(0, sizeof(g_cpus), &g_cpus) == 0;
#endif
    while(have < want)
    {
        try
        {
            std::thread(worker, &p, have + 1).detach();
        }
        catch(const std::system_error&)
        {
            break; // no more threads: run with those there are
        }
        p.workers.store(++have, std::memory_order_release);
    }
    p.grow.unlock();
    return have;
}

} // namespace

void pool_run(int64_t total, int width, bool wake, void (*fn)(void* ctx, int64_t item, int slice), void* ctx)
{
    Pool* pp = width <= 1 || total <= 1 || total >= static_cast<int64_t>(kClosed) ? nullptr : pool();
    if(pp != nullptr)
    {
        width = std::min(width, 1 + ensure_workers(*pp, width - 1));
        if(width <= 1 || !pp->caller.try_lock())
            pp = nullptr;
    }
    if(pp == nullptr)
    {
        for(int64_t i = 0; i < total; ++i)
            fn(ctx, i, 0);
        return;
    }
    Pool& p = *pp;
    const uint64_t gen = (p.ticket.load(std::memory_order_relaxed) >> 32) + 1;
    p.ticket.store((gen << 32) | kClosed, std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_release); // closed before any field of the new job
    p.fn.store(fn, std::memory_order_relaxed);
    p.ctx.store(ctx, std::memory_order_relaxed);
    p.total.store(total, std::memory_order_relaxed);
    p.width.store(width, std::memory_order_relaxed);
    p.done.store(0, std::memory_order_relaxed);
    p.ticket.store(gen << 32, std::memory_order_seq_cst);
    if(wake && p.sleepers.load(std::memory_order_seq_cst) > 0)
    {
        p.caller_cpu.store(current_cpu(), std::memory_order_relaxed);
        {
            // Taking the workers' mutex orders this job before any sleeper's last look at the ticket.
            std::lock_guard<std::mutex> lk(p.m);
        }
        p.cv.notify_all();
    }
    claim(p, 0);
    while(p.done.load(std::memory_order_acquire) < total)
        HIPDNN_POOL_PAUSE();
    p.caller.unlock();
}

} // namespace hipdnn_cpu
