// bench_thrust.cpp — Thrust host-backend peers (thrust::inclusive_scan with cpp::par, omp::par, tbb::par).
//
// Compiled as plain C++ (THRUST_DEVICE_SYSTEM is CPP or OMP, set by bench/CMakeLists.txt). Note
// that Thrust's OpenMP backend inherits the sequential cpp scan, so thrust_omp is expected to
// match thrust_cpp; the TBB backend has a parallel scan.
#include "bench_common.hpp"

#if ASCAN_BENCH_HAVE_THRUST
#include <thrust/iterator/reverse_iterator.h>
#include <thrust/scan.h>
#include <thrust/system/cpp/execution_policy.h>
#if ASCAN_BENCH_HAVE_THRUST_OMP
#include <thrust/system/omp/execution_policy.h>
#endif
#if ASCAN_BENCH_HAVE_THRUST_TBB
#include <thrust/system/tbb/execution_policy.h>
#endif
#endif

namespace ascan_bench {

#if ASCAN_BENCH_HAVE_THRUST
namespace {

template <Op O, int N, class Policy>
void bench_thrust(benchmark::State& st, CaseSpec spec, const Policy& policy) {
  CaseData& c = get_case(O, N);
  const PeerIo<O, N> io = peer_io<O, N>(c);
  const auto op = peer_op<O, N>();
  const auto once = [&] {
    if (!spec.reverse) {
      thrust::inclusive_scan(policy, io.in, io.in + io.n, io.out, op);
    } else {  // the accumulated (later) value stays on the left, as in ascan's reverse
      thrust::inclusive_scan(policy, thrust::make_reverse_iterator(io.in + io.n),
                             thrust::make_reverse_iterator(io.in), thrust::make_reverse_iterator(io.out + io.n),
                             op);
    }
  };
  run_timed(st, c, once, [&] { return check_peer<O, N>(c, io.out, spec.reverse); });
}

template <Op O, int N>
void register_for(const CaseSpec& spec) {
  const auto add = [&](const char* impl, auto policy) {
    benchmark::RegisterBenchmark(case_name(spec, impl).c_str(), [spec, policy](benchmark::State& st) {
      bench_thrust<O, N>(st, spec, policy);
    })->UseRealTime();
  };
  add("thrust_cpp", thrust::cpp::par);
#if ASCAN_BENCH_HAVE_THRUST_OMP
  add("thrust_omp", thrust::omp::par);
#endif
#if ASCAN_BENCH_HAVE_THRUST_TBB
  add("thrust_tbb", thrust::tbb::par);
#endif
}

template <Op O>
void register_op(const CaseSpec& spec) {
  switch (spec.inner) {
    case 1: register_for<O, 1>(spec); break;
    case 7: register_for<O, 7>(spec); break;
    case 256: register_for<O, 256>(spec); break;
    default: break;
  }
}

}  // namespace

void register_thrust_peers(const CaseSpec& spec) {
  if (spec.op == Op::add) register_op<Op::add>(spec);
  else register_op<Op::linrec>(spec);
}
#else
void register_thrust_peers(const CaseSpec&) {}
#endif

}  // namespace ascan_bench
