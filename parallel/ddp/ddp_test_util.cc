#include "parallel/ddp/ddp_test_util.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <istream>
#include <optional>
#include <ostream>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "comm/builtin/process_group_builtin.h"
#include "comm/store/tcp_store.h"
#include "nn/layers/cross_entropy.h"
#include "nn/optim/module_params.h"
#include "nn/optim/param.h"

namespace colossal::parallel::testing {

using core::DType;
using core::Stream;
using core::Tensor;

nn::GPT2Config tiny_config(double checkpoint_ratio) {
  nn::GPT2Config c;
  c.n_layer = 2;
  c.n_head = 2;
  c.n_embd = 8;
  c.vocab_size = 11;
  c.max_seq_len = kT;
  c.padded_vocab_multiple = 8;
  c.checkpoint_ratio = checkpoint_ratio;
  return c;
}

const char* family_name(Family family) {
  switch (family) {
    case Family::kGpt2:
      return "gpt2";
    case Family::kLlama:
      return "llama";
    case Family::kLlamaTied:
      return "llama_tied";
    case Family::kQwen2:
      return "qwen2";
  }
  return "?";
}

std::string family_suffix(Family family) {
  return family == Family::kGpt2 ? "" : absl::StrCat("_", family_name(family));
}

nn::LlamaConfig tiny_llama_config(bool tied, double checkpoint_ratio) {
  // rope_theta 100 gives inv_freq 1 and 0.1 (wavelengths 6.3 and 63): Llama 3
  // scaling over 8 original positions smooths the first, divides the second.
  return nn::LlamaConfig{
      .vocab_size = 11,
      .hidden_size = 16,
      .intermediate_size = 24,
      .num_hidden_layers = 2,
      .num_attention_heads = 4,
      .num_key_value_heads = 2,
      .max_position_embeddings = 4 * kT,
      .rms_norm_eps = 1e-5,
      .rope_theta = 100.0,
      .rope_scaling = kernels::rope::Llama3RopeScaling{8.0, 1.0, 4.0, 8},
      .tie_word_embeddings = tied,
      .padded_vocab_multiple = 8,  // 11 -> 16
      .checkpoint_ratio = checkpoint_ratio,
  };
}

nn::LlamaConfig tiny_llama_config(Family family, double checkpoint_ratio) {
  nn::LlamaConfig c = tiny_llama_config(family != Family::kLlama, checkpoint_ratio);
  c.qkv_bias = family == Family::kQwen2;
  return c;
}

nn::MicroBatch micro_batch(int step, int rank, int micro) {
  Tensor in = *Tensor::empty({kRows, kT}, DType::kI32, Stream::cpu());
  Tensor tg = *Tensor::empty({kRows, kT}, DType::kI32, Stream::cpu());
  uint64_t x = 0x9E3779B97F4A7C15ull ^ (uint64_t(step) * 1000003 + rank * 1009 + micro * 17);
  auto next = [&x] {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<int32_t>((x >> 33) % 11);
  };
  for (int64_t r = 0; r < kRows; ++r) {
    int32_t prev = next();
    for (int64_t t = 0; t < kT; ++t) {
      const int32_t cur = next();
      in.data<int32_t>()[r * kT + t] = prev;
      tg.data<int32_t>()[r * kT + t] = cur;
      prev = cur;
    }
  }
  return {in, tg, nullptr};
}

std::unique_ptr<nn::CausalLM> declare_model(Family family, double checkpoint_ratio) {
  if (family == Family::kGpt2) return *nn::GPT2::declare(tiny_config(checkpoint_ratio), DType::kF32);
  return *nn::Llama::declare(tiny_llama_config(family, checkpoint_ratio), DType::kF32);
}

std::unique_ptr<nn::GPT2> make_model(uint64_t seed, double checkpoint_ratio) {
  auto model = *nn::GPT2::create(tiny_config(checkpoint_ratio), DType::kF32, Stream::cpu());
  EXPECT_TRUE(model->init(seed).ok());
  return model;
}

std::unique_ptr<nn::CausalLM> materialized(std::unique_ptr<nn::CausalLM> model, uint64_t seed) {
  const absl::Status allocated = model->store().allocate(Stream::cpu());
  EXPECT_TRUE(allocated.ok()) << allocated;
  const absl::Status initialized = model->init(seed);
  EXPECT_TRUE(initialized.ok()) << initialized;
  return model;
}

std::unique_ptr<nn::CausalLM> make_model(Family family, uint64_t seed, double checkpoint_ratio) {
  return materialized(declare_model(family, checkpoint_ratio), seed);
}

std::unique_ptr<nn::Sgd> make_sgd(nn::CausalLM& model) {
  std::vector<nn::ParamRef> params =
      *nn::optimizer_params(model.store().parameters(), Stream::cpu());
  nn::SgdOptions o;
  o.lr = 0.1;
  return *nn::Sgd::create({nn::ParamGroup{std::move(params)}}, o);
}

std::unique_ptr<nn::Adam> make_adam(nn::CausalLM& model, bool declared) {
  std::vector<nn::ParamRef> params =
      declared ? nn::declared_params(model.store().table())
               : *nn::model_optimizer_params(model.store(), Stream::cpu());
  nn::AdamOptions o;
  o.lr = 1e-2;
  return *nn::make_adamw(nn::split_decay_groups(std::move(params), kWeightDecay), o);
}

std::vector<float> floats_of(const Tensor& t) {
  return std::vector<float>(t.data<float>(), t.data<float>() + t.numel());
}

void write_floats(std::ostream& out, const std::vector<float>& v) {
  const uint64_t n = v.size();
  out.write(reinterpret_cast<const char*>(&n), sizeof n);
  out.write(reinterpret_cast<const char*>(v.data()), static_cast<std::streamsize>(n * 4));
}

std::vector<float> read_floats(std::istream& in) {
  uint64_t n = 0;
  in.read(reinterpret_cast<char*>(&n), sizeof n);
  if (!in || n > (uint64_t{1} << 24)) return {};
  std::vector<float> v(n);
  in.read(reinterpret_cast<char*>(v.data()), static_cast<std::streamsize>(n * 4));
  return in ? v : std::vector<float>{};
}

double rel_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double d = 0, m = 1e-30;
  for (size_t i = 0; i < a.size(); ++i) {
    d = std::max(d, std::abs(double(a[i]) - b[i]));
    m = std::max(m, std::abs(double(b[i])));
  }
  return d / m;
}

float booster_micro_step(core::Context& ctx, Booster& booster, nn::CausalLM& model,
                         const nn::MicroBatch& mb, float dloss) {
  auto out = booster.forward(ctx, model, mb.tokens);
  EXPECT_TRUE(out.ok()) << out.status();
  if (!out.ok()) return NAN;
  nn::CrossEntropyOptions co;
  co.dloss = dloss;
  auto ce = model.loss(ctx, out->output, mb.targets, co);
  EXPECT_TRUE(ce.ok()) << ce.status();
  if (!ce.ok()) return NAN;
  auto dx = booster.backward(ctx, model, *out->saved, ce->dlogits);
  EXPECT_TRUE(dx.ok()) << dx.status();
  return ce->loss;
}

absl::StatusOr<std::unique_ptr<comm::TcpStore>> serve_loopback_store() {
  comm::TcpStoreOptions o;
  o.host = "127.0.0.1";
  o.listen_address = "127.0.0.1";
  o.port = 0;
  o.is_master = true;
  o.timeout = absl::Seconds(30);
  return comm::TcpStore::create(o);
}

absl::StatusOr<std::shared_ptr<comm::ProcessGroup>> connect_builtin_group(
    int port, int rank, int world, comm::TransportKind transport) {
  comm::TcpStoreOptions so;
  so.host = "127.0.0.1";
  so.port = port;
  so.timeout = absl::Seconds(30);
  auto store = comm::TcpStore::create(so);
  if (!store.ok()) return store.status();
  comm::BuiltinOptions o;
  o.transport = transport;
  o.timeout = absl::Seconds(30);
  return comm::ProcessGroupBuiltin::create(std::shared_ptr<comm::Store>(std::move(*store)), rank,
                                           world, o);
}

void run_ranks(int world,
               const std::function<void(int, std::shared_ptr<comm::ProcessGroup>)>& fn) {
  auto master = serve_loopback_store();
  ASSERT_TRUE(master.ok()) << master.status();
  const int port = (*master)->port();
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      auto pg = connect_builtin_group(port, r, world, comm::TransportKind::kInproc);
      ASSERT_TRUE(pg.ok()) << pg.status();
      fn(r, *pg);
    });
  }
  for (std::thread& t : threads) t.join();
}

EquivalenceRun reference_run(nn::CausalLM& model, nn::Optimizer& optimizer, int world, int steps,
                             int micro) {
  EquivalenceRun run;
  auto ctx = std::move(*core::Context::create(core::Device::cpu()));
  for (int step = 0; step < steps; ++step) {
    std::vector<nn::MicroBatch> mbs;
    for (int r = 0; r < world; ++r) {
      for (int i = 0; i < micro; ++i) mbs.push_back(micro_batch(step, r, i));
    }
    nn::TrainStepOptions o;
    o.max_norm = kMaxNorm;
    auto res = nn::train_step(*ctx, model, optimizer, model.vocab_size(), mbs, o);
    EXPECT_TRUE(res.ok()) << res.status();
    if (!res.ok()) return run;
    run.loss.push_back(res->loss);
    run.clipped.push_back(res->step.clip_coef < 1.0f);
    run.grad_norm.push_back(res->step.grad_norm);
  }
  run.weights = floats_of(model.store().flat_values(DType::kF32));
  return run;
}

namespace {

std::unique_ptr<nn::Optimizer> make_optimizer(nn::CausalLM& model, bool adamw) {
  if (adamw) return make_adam(model);
  return make_sgd(model);
}

}  // namespace

EquivalenceRun reference_run(int world, const DdpRunSpec& spec) {
  auto model = make_model(spec.family, kSeed);
  auto optimizer = make_optimizer(*model, spec.adamw);
  return reference_run(*model, *optimizer, world, spec.steps);
}

EquivalenceRun ddp_rank_run(std::shared_ptr<comm::ProcessGroup> pg, const DdpOptions& options,
                            const DdpRunSpec& spec) {
  EquivalenceRun run;
  const int rank = pg->rank();
  auto ctx = std::move(*core::Context::create(core::Device::cpu()));
  // Different on every rank: boost broadcasts rank 0's.
  auto model = make_model(spec.family, kSeed + rank, spec.checkpoint_ratio);
  auto optimizer = make_optimizer(*model, spec.adamw);
  auto plugin = DdpPlugin::create(pg, options);
  EXPECT_TRUE(plugin.ok()) << plugin.status();
  if (!plugin.ok()) return run;
  DdpPlugin* ddp = plugin->get();
  Booster booster(std::move(*plugin));
  const absl::Status boosted = booster.boost(*model, model->store(), *optimizer);
  EXPECT_TRUE(boosted.ok()) << boosted;
  if (!boosted.ok()) return run;
  EXPECT_EQ(booster.plugin().dp_rank(), rank);
  EXPECT_EQ(booster.plugin().dp_size(), pg->size());
  for (int step = 0; step < spec.steps; ++step) {
    EXPECT_TRUE(booster.zero_grad().ok());
    double sum = 0;
    for (int i = 0; i < kMicro; ++i) {
      std::optional<Booster::NoSync> no_sync;
      if (i + 1 < kMicro) no_sync.emplace(booster.no_sync());
      sum += booster_micro_step(*ctx, booster, *model, micro_batch(step, rank, i), 1.0f / kMicro);
    }
    auto r = booster.step({.max_norm = kMaxNorm});
    EXPECT_TRUE(r.ok()) << r.status();
    if (!r.ok()) return run;
    run.loss.push_back(static_cast<float>(sum / kMicro));
    run.clipped.push_back(r->clip_coef < 1.0f);
    run.grad_norm.push_back(r->grad_norm);
  }
  run.weights = floats_of(model->store().flat_values(DType::kF32));
  run.buckets = ddp->buckets().size();
  run.issued = ddp->reductions_issued();
  run.issued_in_hooks = ddp->reductions_issued_in_hooks();
  return run;
}

}  // namespace colossal::parallel::testing
