#include "nn/module/gradcheck.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/status/status.h"

namespace colossal::nn {
namespace {

absl::StatusOr<double> objective(core::Context& ctx, Module& module, const core::Tensor& input,
                                 const std::vector<double>& r) {
  COLOSSAL_ASSIGN_OR_RETURN(ForwardResult out, module.forward(ctx, input));
  const double* y = out.output.data<double>();
  double sum = 0;
  for (size_t i = 0; i < r.size(); ++i) sum += y[i] * r[i];
  return sum;
}

}  // namespace

absl::StatusOr<GradCheckReport> gradcheck(core::Context& ctx, Module& module,
                                          ParameterStore& store, const core::Tensor& input,
                                          const GradCheckOptions& options) {
  const core::Stream& stream = ctx.compute_stream();
  COLOSSAL_RETURN_IF_ERROR(store.zero_grad(stream));
  COLOSSAL_ASSIGN_OR_RETURN(ForwardResult out, module.forward(ctx, input));
  if (out.output.dtype() != core::DType::kF64) {
    return absl::InvalidArgumentError("gradcheck needs a float64 module output");
  }
  std::mt19937_64 rng(options.seed);
  std::normal_distribution<double> normal;
  std::vector<double> r(static_cast<size_t>(out.output.numel()));
  for (double& v : r) v = normal(rng);
  COLOSSAL_ASSIGN_OR_RETURN(core::Tensor dy,
                            core::Tensor::empty(out.output.shape(), core::DType::kF64, stream));
  std::copy(r.begin(), r.end(), dy.data<double>());
  COLOSSAL_ASSIGN_OR_RETURN(core::Tensor dx, module.backward(ctx, *out.saved, dy));

  GradCheckReport report;
  auto check = [&](const std::string& what, double* values, const double* analytic,
                   int64_t n) -> absl::Status {
    const int64_t step = options.max_elements_per_tensor > 0
                             ? std::max<int64_t>(1, n / options.max_elements_per_tensor)
                             : 1;
    for (int64_t i = 0; i < n; i += step) {
      const double saved = values[i];
      values[i] = saved + options.eps;
      COLOSSAL_ASSIGN_OR_RETURN(double plus, objective(ctx, module, input, r));
      values[i] = saved - options.eps;
      COLOSSAL_ASSIGN_OR_RETURN(double minus, objective(ctx, module, input, r));
      values[i] = saved;
      const double numeric = (plus - minus) / (2 * options.eps);
      const double err = std::abs(analytic[i] - numeric) / std::max(1.0, std::abs(numeric));
      ++report.checked;
      if (err > report.max_error || std::isnan(err)) {
        report.max_error = std::isnan(err) ? INFINITY : err;
        report.worst = absl::StrCat(what, "[", i, "]: analytic ", analytic[i], " numeric ",
                                    numeric);
      }
    }
    return absl::OkStatus();
  };

  if (input.dtype() == core::DType::kF64) {
    if (!dx.defined()) return absl::InvalidArgumentError("backward returned no input gradient");
    COLOSSAL_RETURN_IF_ERROR(check("input", input.data<double>(), dx.data<double>(), input.numel()));
  }
  for (const Parameter& p : store.parameters()) {
    if (p.value.dtype() != core::DType::kF64) continue;
    // Copy the analytic gradient: the objective's forwards do not touch it, but be safe.
    std::vector<double> g(p.grad.data<double>(), p.grad.data<double>() + p.grad.numel());
    COLOSSAL_RETURN_IF_ERROR(check(p.name, p.value.data<double>(), g.data(), p.value.numel()));
  }
  return report;
}

namespace {

void set(core::Tensor& t, int64_t i, double v) {
  if (t.dtype() == core::DType::kF64) {
    t.data<double>()[i] = v;
  } else {
    t.data<float>()[i] = static_cast<float>(v);
  }
}

}  // namespace

ParameterStore random_parameters(Module& module, uint64_t seed,
                                 const std::function<bool(const std::string&)>& is_scale) {
  ParameterTable table;
  COLOSSAL_CHECK_OK(module.declare(table));
  absl::StatusOr<ParameterStore> store = ParameterStore::create(table, core::Stream::cpu());
  COLOSSAL_CHECK_OK(store.status());
  COLOSSAL_CHECK_OK(module.bind(*store));
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0.0, 0.5);
  for (const Parameter& p : store->parameters()) {
    core::Tensor value = p.value;
    const double shift = is_scale(p.name) ? 1.0 : 0.0;
    for (int64_t i = 0; i < value.numel(); ++i) set(value, i, normal(rng) + shift);
  }
  return *std::move(store);
}

core::Tensor random_normal(const core::Shape& shape, uint64_t seed, core::DType dtype,
                           double scale) {
  absl::StatusOr<core::Tensor> t = core::Tensor::empty(shape, dtype, core::Stream::cpu());
  COLOSSAL_CHECK_OK(t.status());
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0.0, scale);
  for (int64_t i = 0; i < t->numel(); ++i) set(*t, i, normal(rng));
  return *t;
}

}  // namespace colossal::nn
