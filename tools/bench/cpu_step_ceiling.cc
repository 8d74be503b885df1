// The GEMM-bound ceiling of one GPT-2 training step on this CPU: every matrix
// product the CPU step makes (forward and backward of each linear layer, the
// attention products per head, the LM head), each timed as one OpenBLAS sgemm
// call of that shape with the threads the training run has, and the step time
// it would take if it did nothing but those GEMMs at those speeds.
//
//   bazel run -c opt --config=cpu //tools/bench:cpu_step_ceiling --
//       --n_layer 4 --n_head 4 --n_embd 128 --batch 8 --seq 128 --vocab 50304
//   (one command line)
//
// Prints one line per shape (count per step, GFLOP, GFLOP/s) and last the
// ceiling: ms per step and tokens/s. Compare `colossal bench` of the same
// recipe against it (CONTRIBUTING.md, "CPU training").
#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace {

struct Shape {
  const char* what;
  bool trans_a, trans_b;
  int m, n, k;
  int count;  // calls per step
};

// Seconds of the fastest of `reps` calls (after one warm-up call).
double time_sgemm(const Shape& s, int reps) {
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> a(static_cast<size_t>(s.m) * s.k), b(static_cast<size_t>(s.k) * s.n),
      c(static_cast<size_t>(s.m) * s.n);
  for (float& x : a) x = u(rng);
  for (float& x : b) x = u(rng);
  const int lda = s.trans_a ? s.m : s.k, ldb = s.trans_b ? s.k : s.n;
  double best = 1e30;
  for (int r = 0; r <= reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    cblas_sgemm(CblasRowMajor, s.trans_a ? CblasTrans : CblasNoTrans,
                s.trans_b ? CblasTrans : CblasNoTrans, s.m, s.n, s.k, 1.0f, a.data(), lda,
                b.data(), ldb, 0.0f, c.data(), s.n);
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (r > 0) best = std::min(best, dt);
  }
  return best;
}

int flag(int argc, char** argv, const char* name, int fallback) {
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], name) == 0) return std::atoi(argv[i + 1]);
  }
  return fallback;
}

}  // namespace

int main(int argc, char** argv) {
  const int L = flag(argc, argv, "--n_layer", 4), H = flag(argc, argv, "--n_head", 4);
  const int C = flag(argc, argv, "--n_embd", 128), B = flag(argc, argv, "--batch", 8);
  const int T = flag(argc, argv, "--seq", 128), V = flag(argc, argv, "--vocab", 50304);
  const int reps = flag(argc, argv, "--reps", 5);
  if (L <= 0 || H <= 0 || C <= 0 || B <= 0 || T <= 0 || V <= 0 || C % H != 0 || reps <= 0) {
    std::fprintf(stderr, "cpu_step_ceiling: sizes must be positive and n_embd a multiple of n_head\n");
    return 2;
  }
  const int N = B * T, D = C / H, BH = B * H;
  // A linear layer y[N, out] = x[N, in] W[out, in]^T: forward, input gradient,
  // weight gradient, as core/gemm calls them.
  std::vector<Shape> shapes;
  auto linear = [&](const char* what, int in, int out, int count) {
    shapes.push_back({what, false, true, N, out, in, count});   // y = x W^T
    shapes.push_back({what, false, false, N, in, out, count});  // dx = dy W
    shapes.push_back({what, true, false, out, in, N, count});   // dW = dy^T x
  };
  linear("qkv", C, 3 * C, L);
  linear("attn proj", C, C, L);
  linear("fc", C, 4 * C, L);
  linear("fc proj", 4 * C, C, L);
  linear("lm head", C, V, 1);
  // Attention per (batch, head): S = Q K^T, Y = P V; backward dP = dY V^T,
  // dV = P^T dY, dQ = dS K, dK = dS^T Q.
  shapes.push_back({"attn QK^T", false, true, T, T, D, L * BH});
  shapes.push_back({"attn PV", false, false, T, D, T, L * BH});
  shapes.push_back({"attn dP", false, true, T, T, D, L * BH});
  shapes.push_back({"attn dV", true, false, T, D, T, L * BH});
  shapes.push_back({"attn dQ", false, false, T, D, T, L * BH});
  shapes.push_back({"attn dK", true, false, T, D, T, L * BH});

  std::printf("%-10s %2s %2s %7s %7s %7s %6s %9s %9s\n", "gemm", "tA", "tB", "m", "n", "k",
              "calls", "GFLOP", "GFLOP/s");
  double flops = 0, seconds = 0;
  for (const Shape& s : shapes) {
    const double f = 2.0 * s.m * s.n * s.k;
    const double t = time_sgemm(s, reps);
    flops += f * s.count;
    seconds += t * s.count;
    std::printf("%-10s %2d %2d %7d %7d %7d %6d %9.3f %9.1f\n", s.what, s.trans_a, s.trans_b, s.m,
                s.n, s.k, s.count, f * s.count / 1e9, f / t / 1e9);
  }
  std::printf("ceiling: %.1f GFLOP per step at %.1f GFLOP/s = %.1f ms/step, %.0f tokens/s\n",
              flops / 1e9, flops / seconds / 1e9, seconds * 1e3, N / seconds);
  return 0;
}
