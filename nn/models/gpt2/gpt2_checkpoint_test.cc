// Activation checkpointing of GPT-2 blocks (GPT2Config::checkpoint_ratio,
// Module::set_checkpoint): bit-identical gradients, what the Saved context
// keeps, hook order during the recomputation, several micro-batches in flight.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "nn/layers/block.h"
#include "nn/layers/cross_entropy.h"
#include "nn/models/gpt2/gpt2.h"

namespace colossal::nn {
namespace {

using core::DType;
using core::Stream;
using core::Tensor;

GPT2Config tiny_config(int64_t n_layer, double ratio) {
  GPT2Config c;
  c.n_layer = n_layer;
  c.n_head = 2;
  c.n_embd = 8;
  c.vocab_size = 11;
  c.max_seq_len = 4;
  c.padded_vocab_multiple = 8;  // 11 -> 16
  c.checkpoint_ratio = ratio;
  return c;
}

Tensor tokens_of(std::vector<int32_t> ids, int64_t B, int64_t T) {
  Tensor t = *Tensor::empty({B, T}, DType::kI32, Stream::cpu());
  std::copy(ids.begin(), ids.end(), t.data<int32_t>());
  return t;
}

std::vector<uint8_t> bytes_of(const Tensor& t) {
  std::vector<uint8_t> out(t.nbytes());
  std::memcpy(out.data(), t.raw_data(), out.size());
  return out;
}

class CheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override { ctx_ = std::move(*core::Context::create(core::Device::cpu())); }

  // A float32 model with weights larger than GPT-2's (every path carries signal).
  std::unique_ptr<GPT2> make(const GPT2Config& c) {
    auto model = *GPT2::create(c, DType::kF32, Stream::cpu());
    EXPECT_TRUE(model->init(11).ok());
    Tensor w = model->store().flat_values(DType::kF32);
    for (int64_t i = 0; i < w.numel(); ++i) w.data<float>()[i] *= 10.0f;
    return model;
  }

  // Zeroes the gradients, runs forward, the loss head and backward; returns
  // the logits' bytes and the flat gradients' bytes.
  std::pair<std::vector<uint8_t>, std::vector<uint8_t>> step(GPT2& model, const Tensor& tokens,
                                                             const Tensor& targets) {
    EXPECT_TRUE(model.store().zero_grad(Stream::cpu()).ok());
    ForwardResult out = *model.forward(*ctx_, tokens);
    CrossEntropyResult ce = *cross_entropy(*ctx_, out.output, targets, 11, {});
    EXPECT_TRUE(model.backward(*ctx_, *out.saved, ce.dlogits).ok());
    return {bytes_of(out.output), bytes_of(model.store().flat_grads(DType::kF32))};
  }

  std::unique_ptr<core::Context> ctx_;
};

TEST_F(CheckpointTest, ConfigChoosesTheFirstBlocksTruncatingLikeColossalAI) {
  EXPECT_EQ(tiny_config(4, 0.0).checkpointed_layers(), 0);
  EXPECT_EQ(tiny_config(4, 0.5).checkpointed_layers(), 2);
  EXPECT_EQ(tiny_config(3, 0.5).checkpointed_layers(), 1);   // int(1.5)
  EXPECT_EQ(tiny_config(4, 0.99).checkpointed_layers(), 3);  // int(3.96)
  EXPECT_EQ(tiny_config(4, 1.0).checkpointed_layers(), 4);
  auto model = *GPT2::create(tiny_config(4, 0.5), DType::kF32, Stream::cpu());
  std::vector<bool> flags;
  for (size_t i = 0; i < model->blocks().size(); ++i) flags.push_back(model->blocks().at(i).checkpoint());
  EXPECT_EQ(flags, (std::vector<bool>{true, true, false, false}));
  for (double bad : {-0.1, 1.5, std::nan("")}) {
    absl::StatusOr<std::unique_ptr<GPT2>> m = GPT2::create(tiny_config(2, bad), DType::kF32, Stream::cpu());
    ASSERT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(m.status().message().find("checkpoint_ratio"), std::string::npos);
  }
}

// Same kernels in the same order: logits and every gradient equal bit for bit.
TEST_F(CheckpointTest, GradientsAreBitIdenticalForRatios0Half1) {
  Tensor tokens = tokens_of({1, 10, 3, 3, 0, 7, 2, 9}, 2, 4);
  Tensor targets = tokens_of({10, 3, 3, 0, 7, 2, 9, 4}, 2, 4);
  auto plain = make(tiny_config(4, 0.0));
  for (size_t i = 0; i < plain->blocks().size(); ++i) ASSERT_FALSE(plain->blocks().at(i).checkpoint());
  const auto [logits, grads] = step(*plain, tokens, targets);
  float gmax = 0;
  for (int64_t i = 0; i < plain->store().flat_grads(DType::kF32).numel(); ++i) {
    gmax = std::max(gmax, std::abs(plain->store().flat_grads(DType::kF32).data<float>()[i]));
  }
  ASSERT_GT(gmax, 0.01f);
  for (double ratio : {0.0, 0.5, 1.0}) {
    auto model = make(tiny_config(4, ratio));
    const auto [l, g] = step(*model, tokens, targets);
    EXPECT_EQ(l, logits) << ratio;
    EXPECT_EQ(g, grads) << ratio;
  }
}

// A checkpointed block's context holds its input and nothing else.
TEST_F(CheckpointTest, SavedContextHoldsOnlyTheInput) {
  const int64_t B = 2, T = 4, C = 8;
  TransformerBlock block("transformer.h.0", C, 2, DType::kF32);
  ParameterTable table;
  ASSERT_TRUE(block.declare(table).ok());
  ParameterStore store = *ParameterStore::create(table, Stream::cpu());
  ASSERT_TRUE(block.bind(store).ok());
  Tensor x = *Tensor::empty({B, T, C}, DType::kF32, Stream::cpu());
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = 0.1f * static_cast<float>(i % 7);

  ForwardResult plain = *block.forward(*ctx_, x);
  const SavedStats p = plain.saved->stats();
  // ln_1 (input, mean, rstd), attn (c_attn input, q, k, v, probs, c_proj
  // input), ln_2 (3), mlp (c_fc input, gelu input, c_proj input).
  EXPECT_EQ(p.tensors, 3 + 6 + 3 + 3);
  const int64_t f = 4;
  const int64_t expect_bytes = f * (2 * (B * T * C + 2 * B * T)     // ln_1, ln_2
                                    + B * T * C * 5 + B * 2 * T * T  // attn
                                    + B * T * (C + 4 * C + 4 * C));  // mlp
  EXPECT_EQ(p.bytes, expect_bytes);

  block.set_checkpoint(true);
  ForwardResult ckpt = *block.forward(*ctx_, x);
  const SavedStats c = ckpt.saved->stats();
  EXPECT_EQ(c.tensors, 1);
  EXPECT_EQ(c.bytes, static_cast<int64_t>(x.nbytes()));
  EXPECT_EQ(bytes_of(ckpt.output), bytes_of(plain.output));

  // The whole model: each checkpointed block keeps x instead of p.bytes.
  Tensor tokens = tokens_of({1, 10, 3, 3, 0, 7, 2, 9}, B, T);
  auto m0 = make(tiny_config(4, 0.0)), m1 = make(tiny_config(4, 0.5)), m2 = make(tiny_config(4, 1.0));
  const SavedStats s0 = m0->forward(*ctx_, tokens)->saved->stats();
  const SavedStats s1 = m1->forward(*ctx_, tokens)->saved->stats();
  const SavedStats s2 = m2->forward(*ctx_, tokens)->saved->stats();
  const int64_t per_block = p.bytes - static_cast<int64_t>(x.nbytes());
  EXPECT_EQ(s0.bytes - s1.bytes, 2 * per_block);
  EXPECT_EQ(s0.bytes - s2.bytes, 4 * per_block);
  EXPECT_EQ(s0.tensors - s2.tensors, 4 * (p.tensors - 1));
}

// Hooks: the recomputation fires the block's (and its children's) forward
// hooks again, between the backward pre-hook and the backward hook, with
// recomputing() set.
TEST_F(CheckpointTest, RecomputationFiresForwardHooksInsideBackward) {
  auto model = make(tiny_config(2, 0.5));  // block 0 checkpointed, block 1 plain
  std::vector<std::string> events;
  auto record = [&](const char* what) {
    return [&events, what](Module& m, const Tensor&) {
      events.push_back(std::string(what) + " " + m.name() + (m.recomputing() ? " (recompute)" : ""));
      return absl::OkStatus();
    };
  };
  for (size_t i = 0; i < model->blocks().size(); ++i) {
    Module& block = model->blocks().at(i);
    block.add_forward_pre_hook(record("fpre"));
    block.add_forward_hook(record("f"));
    block.add_backward_pre_hook(record("bpre"));
    block.add_backward_hook(record("b"));
    block.children()[1]->add_forward_pre_hook(record("fpre"));  // attn
  }
  Tensor tokens = tokens_of({1, 2, 3, 4}, 1, 4);
  ForwardResult out = *model->forward(*ctx_, tokens);
  Tensor d = *Tensor::empty(out.output.shape(), DType::kF32, Stream::cpu());
  ASSERT_TRUE(d.set_zero(Stream::cpu()).ok());
  ASSERT_TRUE(model->backward(*ctx_, *out.saved, d).ok());
  EXPECT_EQ(events, (std::vector<std::string>{
                        "fpre transformer.h.0", "fpre transformer.h.0.attn", "f transformer.h.0",
                        "fpre transformer.h.1", "fpre transformer.h.1.attn", "f transformer.h.1",
                        "bpre transformer.h.1", "b transformer.h.1",
                        "bpre transformer.h.0",
                        "fpre transformer.h.0 (recompute)",
                        "fpre transformer.h.0.attn (recompute)",
                        "f transformer.h.0 (recompute)",
                        "b transformer.h.0"}));
  EXPECT_FALSE(model->blocks().at(0).recomputing());
  EXPECT_FALSE(model->blocks().at(0).children()[1]->recomputing());
}

// An error during the recomputation names it and leaves recomputing() clear.
TEST_F(CheckpointTest, RecomputationErrorsAreAnnotated) {
  auto model = make(tiny_config(2, 1.0));
  Module& attn = *model->blocks().at(1).children()[1];
  attn.add_forward_pre_hook([](Module& m, const Tensor&) {
    return m.recomputing() ? absl::UnavailableError("parameters not gathered") : absl::OkStatus();
  });
  ForwardResult out = *model->forward(*ctx_, tokens_of({1, 2, 3, 4}, 1, 4));
  Tensor d = *Tensor::empty(out.output.shape(), DType::kF32, Stream::cpu());
  ASSERT_TRUE(d.set_zero(Stream::cpu()).ok());
  absl::StatusOr<Tensor> r = model->backward(*ctx_, *out.saved, d);
  ASSERT_EQ(r.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(r.status().message().find("recomputing the forward (activation checkpointing)"),
            std::string::npos)
      << r.status();
  EXPECT_NE(r.status().message().find("parameters not gathered"), std::string::npos);
  EXPECT_FALSE(attn.recomputing());
  EXPECT_FALSE(model->blocks().at(1).recomputing());
}

// Several micro-batches in flight: each context keeps its own input; backwards
// in reverse order give the plain model's gradients bit for bit. The backward
// follows the context, not the flag, so toggling in between is safe.
TEST_F(CheckpointTest, MicroBatchesInFlightAndToggling) {
  Tensor a = tokens_of({1, 2, 3, 4, 5, 6, 7, 8}, 2, 4), b = tokens_of({9, 9, 0, 1}, 1, 4);
  Tensor ta = tokens_of({2, 3, 4, 5, 6, 7, 8, 9}, 2, 4), tb = tokens_of({9, 0, 1, 2}, 1, 4);
  auto run = [&](GPT2& model, bool toggle) {
    EXPECT_TRUE(model.store().zero_grad(Stream::cpu()).ok());
    ForwardResult fa = *model.forward(*ctx_, a);
    ForwardResult fb = *model.forward(*ctx_, b);
    if (toggle) {
      for (size_t i = 0; i < model.blocks().size(); ++i) {
        Module& block = model.blocks().at(i);
        block.set_checkpoint(!block.checkpoint());
      }
    }
    CrossEntropyResult cb = *cross_entropy(*ctx_, fb.output, tb, 11, {});
    EXPECT_TRUE(model.backward(*ctx_, *fb.saved, cb.dlogits).ok());
    CrossEntropyResult ca = *cross_entropy(*ctx_, fa.output, ta, 11, {});
    EXPECT_TRUE(model.backward(*ctx_, *fa.saved, ca.dlogits).ok());
    return bytes_of(model.store().flat_grads(DType::kF32));
  };
  auto plain = make(tiny_config(3, 0.0));
  const std::vector<uint8_t> expected = run(*plain, false);
  auto ckpt = make(tiny_config(3, 1.0));
  EXPECT_EQ(run(*ckpt, false), expected);
  auto half = make(tiny_config(3, 0.5));
  EXPECT_EQ(run(*half, true), expected);
}

// ---- Dropout (GPT2Config::embd_pdrop / resid_pdrop) ----

GPT2Config dropout_config(int64_t n_layer, double ratio, double embd, double resid) {
  GPT2Config c = tiny_config(n_layer, ratio);
  c.embd_pdrop = embd;
  c.resid_pdrop = resid;
  return c;
}

std::vector<std::string> module_names(Module& m) {
  std::vector<std::string> out{std::string(m.type()) + " " + m.name()};
  for (Module* child : m.children()) {
    std::vector<std::string> sub = module_names(*child);
    out.insert(out.end(), sub.begin(), sub.end());
  }
  return out;
}

TEST_F(CheckpointTest, DropoutConfigIsValidatedAndPlacedAsHuggingFace) {
  for (auto [embd, resid] : {std::pair{1.0, 0.0}, {-0.1, 0.0}, {0.0, 1.0}, {0.0, std::nan("")}}) {
    absl::StatusOr<std::unique_ptr<GPT2>> m =
        GPT2::create(dropout_config(2, 0.0, embd, resid), DType::kF32, Stream::cpu());
    ASSERT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument) << embd << " " << resid;
    EXPECT_NE(m.status().message().find(embd != 0.0 ? "embd_pdrop" : "resid_pdrop"),
              std::string::npos)
        << m.status();
  }
  GPT2Config attn = tiny_config(2, 0.0);
  attn.attn_pdrop = 0.1;
  absl::Status s = attn.validate();
  ASSERT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("attn_pdrop"), std::string::npos) << s;
  EXPECT_NE(s.message().find("not supported"), std::string::npos) << s;

  // p = 0: no Dropout modules at all (the model is exactly the one without dropout).
  auto plain = *GPT2::create(tiny_config(1, 0.0), DType::kF32, Stream::cpu());
  for (const std::string& n : module_names(*plain)) EXPECT_EQ(n.find("Dropout"), std::string::npos) << n;
  auto drop = *GPT2::create(dropout_config(1, 0.0, 0.1, 0.2), DType::kF32, Stream::cpu());
  std::vector<std::string> dropouts;
  for (const std::string& n : module_names(*drop)) {
    if (n.rfind("Dropout ", 0) == 0) dropouts.push_back(n.substr(8));
  }
  EXPECT_EQ(dropouts, (std::vector<std::string>{"transformer.drop",
                                                "transformer.h.0.attn.resid_dropout",
                                                "transformer.h.0.mlp.dropout"}));
  // No parameters added: the same table.
  EXPECT_EQ(drop->table().size(), plain->table().size());
  EXPECT_EQ(drop->table().parameter_count(), plain->table().parameter_count());
}

// Eval mode with dropout = the model without dropout, bit for bit; training
// mode changes the logits, reproducibly for the same seed.
TEST_F(CheckpointTest, DropoutTrainsEvaluatesAndReproduces) {
  Tensor tokens = tokens_of({1, 10, 3, 3, 0, 7, 2, 9}, 2, 4);
  Tensor targets = tokens_of({10, 3, 3, 0, 7, 2, 9, 4}, 2, 4);
  auto plain = make(tiny_config(2, 0.0));
  ctx_->manual_seed(5);
  const auto [logits, grads] = step(*plain, tokens, targets);
  EXPECT_EQ(ctx_->rng_state().offset, 0u) << "no dropout, no random numbers";
  auto model = make(dropout_config(2, 0.0, 0.1, 0.3));
  model->set_training(false);
  const auto [el, eg] = step(*model, tokens, targets);
  EXPECT_EQ(el, logits);
  EXPECT_EQ(eg, grads);
  EXPECT_EQ(ctx_->rng_state().offset, 0u);
  model->set_training(true);
  ctx_->manual_seed(5);
  const auto [tl, tg] = step(*model, tokens, targets);
  EXPECT_NE(tl, logits);
  EXPECT_NE(tg, grads);
  // Reserved: embd_pdrop B*T*C, then per block 2 * B*T*C (B = 2, T = 4, C = 8).
  EXPECT_EQ(ctx_->rng_state().offset, uint64_t{(1 + 2 * 2) * 2 * 4 * 8});
  ctx_->manual_seed(5);
  const auto [tl2, tg2] = step(*model, tokens, targets);
  EXPECT_EQ(tl2, tl) << "same seed, same masks";
  EXPECT_EQ(tg2, tg);
  const auto [tl3, tg3] = step(*model, tokens, targets);
  EXPECT_NE(tl3, tl) << "next step, fresh masks";
}

// With dropout on, checkpointing any number of blocks gives the gradients of
// the plain model bit for bit: the recomputation replays the masks.
TEST_F(CheckpointTest, DropoutGradientsAreBitIdenticalWithCheckpointing) {
  Tensor tokens = tokens_of({1, 10, 3, 3, 0, 7, 2, 9}, 2, 4);
  Tensor targets = tokens_of({10, 3, 3, 0, 7, 2, 9, 4}, 2, 4);
  auto plain = make(dropout_config(4, 0.0, 0.1, 0.2));
  ctx_->manual_seed(42);
  const auto [logits, grads] = step(*plain, tokens, targets);
  const core::RngState after = ctx_->rng_state();
  for (double ratio : {0.5, 1.0}) {
    auto model = make(dropout_config(4, ratio, 0.1, 0.2));
    ctx_->manual_seed(42);
    const auto [l, g] = step(*model, tokens, targets);
    EXPECT_EQ(l, logits) << ratio;
    EXPECT_EQ(g, grads) << ratio;
    EXPECT_EQ(ctx_->rng_state(), after) << "the recomputation draws no new numbers";
  }
}

// Two micro-batches in flight (forward, forward, backward, backward), with
// dropout: checkpointed and plain models accumulate the same gradients.
TEST_F(CheckpointTest, DropoutMicroBatchesInFlightWithCheckpointing) {
  Tensor t0 = tokens_of({1, 10, 3, 3, 0, 7, 2, 9}, 2, 4);
  Tensor t1 = tokens_of({4, 4, 8, 1, 2, 6, 5, 0}, 2, 4);
  Tensor y0 = tokens_of({10, 3, 3, 0, 7, 2, 9, 4}, 2, 4);
  Tensor y1 = tokens_of({4, 8, 1, 2, 6, 5, 0, 3}, 2, 4);
  std::vector<uint8_t> result[2];
  for (int ck = 0; ck < 2; ++ck) {
    auto model = make(dropout_config(3, ck == 0 ? 0.0 : 1.0, 0.2, 0.2));
    ASSERT_TRUE(model->store().zero_grad(Stream::cpu()).ok());
    ctx_->manual_seed(9);
    ForwardResult f0 = *model->forward(*ctx_, t0);
    ForwardResult f1 = *model->forward(*ctx_, t1);
    CrossEntropyResult c1 = *cross_entropy(*ctx_, f1.output, y1, 11, {});
    ASSERT_TRUE(model->backward(*ctx_, *f1.saved, c1.dlogits).ok());
    CrossEntropyResult c0 = *cross_entropy(*ctx_, f0.output, y0, 11, {});
    ASSERT_TRUE(model->backward(*ctx_, *f0.saved, c0.dlogits).ok());
    result[ck] = bytes_of(model->store().flat_grads(DType::kF32));
  }
  EXPECT_EQ(result[0], result[1]);
}

}  // namespace
}  // namespace colossal::nn
