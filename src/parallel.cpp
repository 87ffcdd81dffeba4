// parallel.cpp — a small persistent thread pool (condition variable wake-up, caller joins in).
#include "ascan/parallel.hpp"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "ascan/error.hpp"

#if defined(__x86_64__) || defined(_M_X64) || defined(__SSE2__)
#include <xmmintrin.h>
#define ASCAN_MXCSR 1
#endif

namespace ascan {
namespace {

thread_local bool t_in_region = false;
std::atomic<bool> g_flush_denormals{true};

thread_local int t_mode_depth = 0;     // FloatModeScopes alive on this thread
thread_local bool t_mode_flush = true;  // the outermost one's mode (what workers are given)

// The floating-point control word's flush bits for `flush` (set or cleared); returns the word
// before. Results then depend on the setting alone, not on the thread's inherited mode.
uint64_t set_float_mode(bool flush) {
#if defined(ASCAN_MXCSR)
  const unsigned saved = _mm_getcsr();
  _mm_setcsr(flush ? saved | 0x8040u : saved & ~0x8040u);  // FTZ (bit 15), DAZ (bit 6)
  return saved;
#elif defined(__aarch64__)
  uint64_t saved;
  asm volatile("mrs %0, fpcr" : "=r"(saved));
  const uint64_t fz = uint64_t{1} << 24;
  asm volatile("msr fpcr, %0" : : "r"(flush ? saved | fz : saved & ~fz));
  return saved;
#else
  (void)flush;
  return 0;
#endif
}

void restore_float_mode(uint64_t saved) {
#if defined(ASCAN_MXCSR)
  _mm_setcsr(static_cast<unsigned>(saved));
#elif defined(__aarch64__)
  asm volatile("msr fpcr, %0" : : "r"(saved));
#else
  (void)saved;
#endif
}

// A pool worker's mode for one job.
class JobFloatMode {
 public:
  explicit JobFloatMode(bool flush) : saved_(set_float_mode(flush)) {}
  ~JobFloatMode() { restore_float_mode(saved_); }
  JobFloatMode(const JobFloatMode&) = delete;
  JobFloatMode& operator=(const JobFloatMode&) = delete;

 private:
  uint64_t saved_;
};

int default_threads() {
  if (const char* env = std::getenv("ASCAN_NUM_THREADS")) {
    const int n = std::atoi(env);
    if (n >= 1) return n;
  }
  const unsigned hc = std::thread::hardware_concurrency();
  return hc == 0 ? 1 : static_cast<int>(hc);
}

class Pool {
 public:
  Pool() : num_threads_(default_threads()) {}

  // Never joined: the pool lives for the whole process (workers are detached at exit).
  int num_threads() const { return num_threads_.load(std::memory_order_relaxed); }
  void set_num_threads(int n) { num_threads_.store(n, std::memory_order_relaxed); }

  void run(int num_workers, const std::function<void(int)>& body) {
    std::unique_lock region(region_mutex_, std::try_to_lock);
    if (!region.owns_lock() || num_workers <= 1) {  // busy (another user thread) or trivial
      run_inline(num_workers, body);
      return;
    }
    ensure_workers(num_workers - 1);
    // Shared with the workers: a worker that wakes late only touches this state, which it keeps
    // alive, and finds no index left to claim.
    auto job = std::make_shared<Job>();
    job->body = &body;
    job->num_workers = num_workers;
    job->flush = t_mode_flush;  // run_workers holds a FloatModeScope
    job->next.store(1);
    job->remaining.store(num_workers - 1);
    {
      std::lock_guard lock(mutex_);
      job_ = job;
      ++generation_;
    }
    work_cv_.notify_all();
    t_in_region = true;
    try {
      body(0);
    } catch (...) {
      job->record(std::current_exception());
    }
    job->help(*this);  // claim workers nobody picked up yet
    t_in_region = false;
    {
      std::unique_lock lock(mutex_);
      done_cv_.wait(lock, [&] { return job->remaining.load() == 0; });
      job_ = nullptr;
    }
    // Taken out of the job, so the exception is freed here: a worker may drop the job later.
    std::exception_ptr error;
    {
      std::lock_guard lock(job->error_mutex);
      error = std::move(job->error);
    }
    if (error) std::rethrow_exception(error);
  }

 private:
  static void run_inline(int num_workers, const std::function<void(int)>& body) {
    const bool was = t_in_region;
    t_in_region = true;
    try {
      for (int w = 0; w < num_workers; ++w) body(w);
    } catch (...) {
      t_in_region = was;
      throw;
    }
    t_in_region = was;
  }

  void ensure_workers(int n) {
    while (static_cast<int>(workers_.size()) < n) {
      workers_.emplace_back([this] { worker_loop(); });
      workers_.back().detach();
    }
  }

  struct Job {
    const std::function<void(int)>* body = nullptr;
    int num_workers = 0;
    bool flush = true;  // the region's flush_denormals(), applied on every worker
    std::atomic<int> next{0};
    std::atomic<int> remaining{0};
    std::mutex error_mutex;
    std::exception_ptr error;

    void record(std::exception_ptr e) {
      std::lock_guard lock(error_mutex);
      if (!error) error = std::move(e);
    }
    void help(Pool& pool) {
      for (int w = next.fetch_add(1); w < num_workers; w = next.fetch_add(1)) {
        try {
          (*body)(w);
        } catch (...) {
          record(std::current_exception());
        }
        if (remaining.fetch_sub(1) == 1) {
          std::lock_guard lock(pool.mutex_);
          pool.done_cv_.notify_all();
        }
      }
    }
  };

  void worker_loop() {
    t_in_region = true;
    uint64_t seen = 0;
    for (;;) {
      std::shared_ptr<Job> job;
      {
        std::unique_lock lock(mutex_);
        work_cv_.wait(lock, [&] { return generation_ != seen && job_; });
        seen = generation_;
        job = job_;
      }
      const JobFloatMode mode(job->flush);
      job->help(*this);
    }
  }

  std::atomic<int> num_threads_;
  std::mutex region_mutex_;
  std::mutex mutex_;
  std::condition_variable work_cv_;
  std::condition_variable done_cv_;
  std::shared_ptr<Job> job_;
  uint64_t generation_ = 0;
  std::vector<std::thread> workers_;
};

Pool& pool() {
  static Pool* instance = new Pool;  // never destroyed: detached workers reference it
  return *instance;
}

}  // namespace

void set_num_threads(int n) {
  if (n < 1) detail::raise("ascan::set_num_threads(): n = {}, expected n >= 1", n);
  pool().set_num_threads(n);
}

int num_threads() { return pool().num_threads(); }

void set_flush_denormals(bool on) { g_flush_denormals.store(on, std::memory_order_relaxed); }
bool flush_denormals() { return g_flush_denormals.load(std::memory_order_relaxed); }

namespace detail {

bool in_parallel_region() { return t_in_region; }

FloatModeScope::FloatModeScope() {
  if (t_in_region || t_mode_depth > 0) return;
  active_ = true;
  ++t_mode_depth;
  t_mode_flush = g_flush_denormals.load(std::memory_order_relaxed);
  saved_ = set_float_mode(t_mode_flush);
}

FloatModeScope::~FloatModeScope() {
  if (!active_) return;
  restore_float_mode(saved_);
  --t_mode_depth;
}

void run_workers(int num_workers, const std::function<void(int)>& body) {
  const FloatModeScope mode;  // a no-op when nested: the enclosing region's mode holds
  if (num_workers <= 1 || t_in_region) {
    for (int w = 0; w < num_workers; ++w) body(w);
    return;
  }
  pool().run(num_workers, body);
}

void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& body) {
  if (n <= 0) return;
  grain = std::max<int64_t>(grain, 1);
  const int64_t max_chunks = (n + grain - 1) / grain;
  const int workers = static_cast<int>(std::min<int64_t>(num_threads(), max_chunks));
  const FloatModeScope mode;
  if (workers <= 1 || t_in_region) {
    body(0, n);
    return;
  }
  // A few chunks per worker balance uneven work without much scheduling overhead.
  const int64_t num_chunks = std::min<int64_t>(max_chunks, int64_t{4} * workers);
  const int64_t chunk = (n + num_chunks - 1) / num_chunks;
  std::atomic<int64_t> next{0};
  run_workers(workers, [&](int) {
    for (int64_t c = next.fetch_add(1); c < num_chunks; c = next.fetch_add(1)) {
      const int64_t b = c * chunk;
      const int64_t e = std::min(n, b + chunk);
      if (b < e) body(b, e);
    }
  });
}

}  // namespace detail
}  // namespace ascan
