// test_golden.cpp — bitwise golden results: hashes of the outputs and gradients of a catalogue of
// scans (every builtin, Pointwise and Generic user combines, batched Generic, float and double,
// forward and reverse, shapes that reach each host engine), compared with the hashes recorded by
// an earlier build on the same kind of machine. It guards refactors that must not change a bit.
//
// Floating-point results depend on the instruction set the code runs with (vector widths and
// fused multiply-adds), on the CPU it tunes for and on optimisation. User combines are compiled
// here, for this file's flags; the builtins are compiled into the library once per ISA level
// (ascan/isa.hpp), so the builtin cases run at every level this machine has, keyed by the level.
// The recorded hashes are kept per build signature (tests/golden/<signature>.txt). For a signature without a file the test checks what
// does not need one: every case gives the same hashes with 1 and 2 threads (in optimised builds;
// sanitizer builds run the float half of the catalogue on 2 threads). Recording:
//   ASCAN_GOLDEN_WRITE=1 build/tests/test_golden   (writes the file for this build's signature)
#include <gtest/gtest.h>

#include <ascan/ascan.hpp>

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "reference.hpp"

namespace {

namespace ad = ascan::ad;
using ascan::Shape;
using ascan::Tensor;

// The CPU model GCC tunes for (its __tune_<cpu>__ macro), "generic" when unnamed here.
[[maybe_unused]] std::string native_cpu() {
#if defined(__tune_znver4__)
  return "znver4";
#elif defined(__tune_znver3__)
  return "znver3";
#elif defined(__tune_znver2__)
  return "znver2";
#elif defined(__tune_znver1__)
  return "znver1";
#elif defined(__tune_sapphirerapids__)
  return "sapphirerapids";
#elif defined(__tune_icelake_server__)
  return "icelake-server";
#elif defined(__tune_cascadelake__)
  return "cascadelake";
#elif defined(__tune_skylake_avx512__)
  return "skylake-avx512";
#elif defined(__tune_haswell__)
  return "haswell";
#else
  return "generic";
#endif
}

std::string signature() {
  std::string s;
#if defined(__AVX512F__)
  s = "avx512";
#elif defined(__AVX2__) && defined(__FMA__)
  s = "avx2";
#elif defined(__x86_64__)
  s = "x86-64";
#else
  s = "other";
#endif
#if defined(__OPTIMIZE__)
  // Optimised code also depends on the CPU -march=native resolves to: its tuning decides where
  // multiplies and adds fuse (seen on 2x2 matrix products: same ISA, other CPU, other bits).
  s += "-" + native_cpu();
  s += "-opt";
#else
  s += "-noopt";
#endif
  s += ref::kSanitized ? "-sanitized" : "";
#if defined(__GNUC__) && !defined(__clang__)
  s += "-gcc" + std::to_string(__GNUC__);
#elif defined(__clang__)
  s += "-clang" + std::to_string(__clang_major__);
#endif
  return s;
}

// FNV-1a over the bytes of each tensor, with its shape.
struct Hasher {
  uint64_t h = 1469598103934665603ull;
  void bytes(const void* p, size_t n) {
    const auto* c = static_cast<const unsigned char*>(p);
    for (size_t i = 0; i < n; ++i) h = (h ^ c[i]) * 1099511628211ull;
  }
  template <class T>
  void add(const Tensor<T>& t) {
    for (int64_t e : t.shape()) bytes(&e, sizeof e);
    if (t.numel()) bytes(t.data(), sizeof(T) * static_cast<size_t>(t.numel()));
  }
};

template <class T>
Tensor<T> randn(Shape s, uint64_t seed) {
  return Tensor<T>::randn(std::move(s), seed);
}
template <class T>
Tensor<T> uniform(Shape s, uint64_t seed, double lo, double hi) {
  return Tensor<T>::random(std::move(s), seed, static_cast<T>(lo), static_cast<T>(hi));
}

// Affine maps as a user Pointwise combine (not the builtin) and as a Generic one.
const auto affine = [](auto l, auto r) {
  auto [a1, b1] = l;
  auto [a2, b2] = r;
  return std::tuple{a2 * a1, a2 * b1 + b2};
};
const auto matmul_fn = [](const auto& a, const auto& b) { return matmul(a, b); };

using Case = std::function<void(Hasher&)>;

// A forward scan and, on Vars with a random cotangent per output, its gradients.
template <class T, class F, class... Leaves>
void scan_and_grad(Hasher& hs, const F& f, int64_t dim, bool reverse, const Leaves&... leaves) {
  const ascan::ScanOptions o{.reverse = reverse};
  if constexpr (sizeof...(Leaves) == 1) {
    hs.add(ascan::associative_scan(f, leaves..., dim, o));
  } else {
    const auto ys = ascan::associative_scan(f, std::tuple{leaves...}, dim, o);
    std::apply([&](const auto&... y) { (hs.add(y), ...); }, ys);
  }
  ad::Tape<T> tape;
  std::vector<ad::Var<T>> xs{ad::param(leaves)...};
  uint64_t seed = 1000;
  const auto seed_of = [&](const ad::Var<T>& y) { return randn<T>(y.shape(), seed++); };
  if constexpr (sizeof...(Leaves) == 1) {
    const ad::Var<T> y = ascan::associative_scan(f, xs[0], dim, o);
    ad::backward(y, seed_of(y));
  } else {
    auto vars = [&]<size_t... I>(std::index_sequence<I...>) { return std::tuple{xs[I]...}; }(
        std::make_index_sequence<sizeof...(Leaves)>{});
    const auto ys = ascan::associative_scan(f, vars, dim, o);
    ad::Var<T> total;
    bool first = true;
    std::apply([&](const auto&... y) {
      ((total = first ? ad::sum(y * ad::constant(seed_of(y))) : total + ad::sum(y * ad::constant(seed_of(y))),
        first = false), ...);
    }, ys);
    ad::backward(total);
  }
  for (const auto& x : xs) hs.add(x.grad());
}

template <class T>
void add_cases(std::map<std::string, Case>& cases, const std::string& tn) {
  const int64_t big = ref::large(int64_t{1} << 20) + 3;
  const std::vector<std::pair<std::string, Shape>> shapes = {
      {"1", {1}}, {"7", {7}}, {"1000", {1000}}, {"big", {big}}, {"T7", {4096, 7}}, {"T256", {1000, 256}},
      {"T1024", {64, 1024}}, {"rows", {4, ref::large(1 << 16)}}, {"3d", {3, 50, 7}}};
  for (const auto& named : shapes) {
    const std::string& sn = named.first;
    const Shape shape = named.second;  // (a variable, not a binding: the cases' lambdas capture it)
    const int64_t dim = shape.size() == 3 ? 1 : (sn == "rows" ? 1 : 0);
    for (bool rev : {false, true}) {
      const std::string key = tn + "/" + sn + (rev ? "/rev" : "/fwd");
      cases[key + "/add"] = [=](Hasher& h) { scan_and_grad<T>(h, ascan::add, dim, rev, randn<T>(shape, 1)); };
      cases[key + "/mul"] = [=](Hasher& h) {
        scan_and_grad<T>(h, ascan::mul, dim, rev, uniform<T>(shape, 2, 0.9999, 1.0001));
      };
      cases[key + "/max"] = [=](Hasher& h) { scan_and_grad<T>(h, ascan::max, dim, rev, randn<T>(shape, 3)); };
      cases[key + "/min"] = [=](Hasher& h) { scan_and_grad<T>(h, ascan::min, dim, rev, randn<T>(shape, 4)); };
      cases[key + "/logaddexp"] = [=](Hasher& h) {
        scan_and_grad<T>(h, ascan::logaddexp, dim, rev, randn<T>(shape, 5));
      };
      cases[key + "/linrec"] = [=](Hasher& h) {
        scan_and_grad<T>(h, ascan::linear_recurrence, dim, rev, uniform<T>(shape, 6, 0.5, 0.99), randn<T>(shape, 7));
      };
      cases[key + "/affine"] = [=](Hasher& h) {
        scan_and_grad<T>(h, affine, dim, rev, uniform<T>(shape, 8, 0.5, 0.99), randn<T>(shape, 9));
      };
    }
  }
  // Broadcast leaves: a decay per lane, a scalar discount.
  for (bool rev : {false, true}) {
    const std::string key = tn + (rev ? "/broadcast/rev" : "/broadcast/fwd");
    cases[key + "/lane_decay"] = [=](Hasher& h) {
      scan_and_grad<T>(h, ascan::linear_recurrence, 0, rev, uniform<T>({1, 256}, 10, 0.5, 0.99), randn<T>({1000, 256}, 11));
    };
    cases[key + "/scalar_decay"] = [=](Hasher& h) {
      scan_and_grad<T>(h, ascan::linear_recurrence, 0, rev, uniform<T>({1}, 12, 0.5, 0.99), randn<T>({5000}, 13));
    };
  }
  // Generic and batched Generic: a chain of 2x2 matrices.
  for (bool rev : {false, true}) {
    const std::string key = tn + (rev ? "/generic/rev" : "/generic/fwd");
    for (int64_t T_len : {int64_t{1}, int64_t{37}, int64_t{600}}) {
      cases[key + "/matmul/" + std::to_string(T_len)] = [=](Hasher& h) {
        scan_and_grad<T>(h, ascan::generic(matmul_fn), 0, rev, uniform<T>({T_len, 2, 2}, 14, -0.7, 0.7));
      };
      cases[key + "/batched_matmul/" + std::to_string(T_len)] = [=](Hasher& h) {
        scan_and_grad<T>(h, ascan::generic_batched(matmul_fn), 0, rev, uniform<T>({T_len, 2, 2}, 15, -0.7, 0.7));
      };
    }
  }
}

std::map<std::string, Case> catalogue() {
  std::map<std::string, Case> cases;
  add_cases<float>(cases, "f32");
  // Sanitizer builds (unoptimised, ~20x slower) keep to float and one thread count.
  if (!ref::kSanitized) add_cases<double>(cases, "f64");
  return cases;
}

// Cases of user combines (compiled in this file: the ISA level does not reach them).
bool user_combine(const std::string& name) {
  return name.find("/affine") != std::string::npos || name.find("/generic/") != std::string::npos;
}

// The builtin cases at every level the machine has ("<level>/<case>" -> hash) and the user
// combines' once ("user/<case>"): the same binary gives the same bits on any CPU with the level.
std::map<std::string, std::string> run_all(int threads, bool every_level = true) {
  const int saved = ascan::num_threads();
  ascan::set_num_threads(threads);
  std::map<std::string, std::string> out;
  for (ascan::Isa level : {ascan::Isa::baseline, ascan::Isa::avx2, ascan::Isa::avx512}) {
    const bool automatic = level == ascan::cpu_isa();
    if (!ascan::isa_available(level) || (!automatic && !every_level)) continue;
    ascan::force_isa(level);
    for (const auto& [name, c] : catalogue()) {
      if (!automatic && user_combine(name)) continue;
      Hasher h;
      c(h);
      std::ostringstream hex;
      hex << std::hex << h.h;
      out[(user_combine(name) ? std::string("user") : std::string(ascan::isa_name(level))) + "/" + name] = hex.str();
    }
  }
  ascan::unforce_isa();
  ascan::set_num_threads(saved);
  return out;
}

std::string golden_path() { return std::string(ASCAN_GOLDEN_DIR) + "/" + signature() + ".txt"; }

TEST(Golden, ResultsMatchTheRecordedBuildBitForBit) {
  const auto two = run_all(2);
  ASSERT_FALSE(two.empty());
  if (std::getenv("ASCAN_GOLDEN_WRITE")) {
    std::ofstream f(golden_path());
    ASSERT_TRUE(f.good()) << "cannot write " << golden_path();
    for (const auto& [name, hash] : two) f << name << ' ' << hash << '\n';
    std::printf("wrote %zu hashes to %s\n", two.size(), golden_path().c_str());
  }
  // Independent of a recording: the thread count changes no bit (checked at the machine's level).
  if (!ref::kSanitized) {
    std::map<std::string, std::string> at_cpu_level;
    const std::string prefix = std::string(ascan::isa_name(ascan::cpu_isa())) + "/";
    for (const auto& [n, h] : two)
      if (n.starts_with(prefix) || n.starts_with("user/")) at_cpu_level[n] = h;
    EXPECT_EQ(run_all(1, false), at_cpu_level);
  }
  std::ifstream f(golden_path());
  if (!f.good()) {
    std::printf("no recorded hashes for build signature %s (%s): checked 1 against 2 threads only\n",
                signature().c_str(), golden_path().c_str());
    return;
  }
  std::map<std::string, std::string> recorded;
  std::string name, hash;
  // A recording from a CPU with more levels: the levels this one lacks are not compared.
  while (f >> name >> hash) {
    const std::string level = name.substr(0, name.find('/'));
    bool available = level == "user";
    for (ascan::Isa l : {ascan::Isa::baseline, ascan::Isa::avx2, ascan::Isa::avx512})
      available = available || (level == ascan::isa_name(l) && ascan::isa_available(l));
    if (available) recorded[name] = hash;
  }
  EXPECT_EQ(recorded.size(), two.size()) << "the catalogue changed since the recording";
  int mismatches = 0;
  for (const auto& [n, h] : recorded) {
    const auto it = two.find(n);
    if (it == two.end()) {
      ADD_FAILURE() << n << ": recorded but no longer in the catalogue";
    } else if (it->second != h && ++mismatches <= 20) {
      ADD_FAILURE() << n << ": hash " << it->second << ", recorded " << h;
    }
  }
  EXPECT_EQ(mismatches, 0);
}

}  // namespace
