#include "io/loader/data_loader.h"

#include <sys/stat.h>

#include <algorithm>
#include <cstdlib>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/alloc/default_allocator.h"
#include "gtest/gtest.h"
#include "io/shards/loss_mask.h"
#include "io/shards/token_shard.h"

namespace colossal::io {
namespace {

std::string MakeTestDir() {
  const char* base = std::getenv("TEST_TMPDIR");
  const std::string dir = absl::StrCat(base != nullptr ? base : "/tmp", "/loader_",
                                       ::testing::UnitTest::GetInstance()->current_test_info()->name());
  ::mkdir(dir.c_str(), 0755);
  return dir;
}

// Shard s holds tokens (s * 7919 + i) mod 65536, i = 0..sizes[s]-1, so every
// window's content says where it came from.
uint16_t TokenAt(int s, int64_t i) { return static_cast<uint16_t>((s * 7919 + i) % 65536); }

std::string WriteShards(const std::string& dir, const std::vector<int64_t>& sizes) {
  for (size_t s = 0; s < sizes.size(); ++s) {
    std::vector<uint16_t> tokens(sizes[s]);
    for (int64_t i = 0; i < sizes[s]; ++i) tokens[i] = TokenAt(static_cast<int>(s), i);
    const absl::Status st = WriteTokenShard(absl::StrFormat("%s/train_%06d.bin", dir, s), tokens);
    EXPECT_TRUE(st.ok()) << st;
  }
  return dir + "/train_*.bin";
}

DataLoaderOptions Options(const std::string& pattern, int64_t B, int64_t T) {
  DataLoaderOptions o;
  o.pattern = pattern;
  o.batch_size = B;
  o.seq_len = T;
  o.seed = 1234;
  return o;
}

std::unique_ptr<DataLoader> OpenOrDie(const DataLoaderOptions& o) {
  absl::StatusOr<std::unique_ptr<DataLoader>> l = DataLoader::Open(o);
  EXPECT_TRUE(l.ok()) << l.status();
  return l.ok() ? *std::move(l) : nullptr;
}

std::vector<int32_t> Values(const core::Tensor& t) {
  const int32_t* p = t.data<int32_t>();
  return std::vector<int32_t>(p, p + t.numel());
}

// inputs then targets of the next `n` batches.
std::vector<std::vector<int32_t>> Take(DataLoader& l, int n) {
  std::vector<std::vector<int32_t>> out;
  for (int i = 0; i < n; ++i) {
    absl::StatusOr<Batch> b = l.next_batch();
    EXPECT_TRUE(b.ok()) << b.status();
    if (!b.ok()) break;
    out.push_back(Values(b->inputs));
    out.push_back(Values(b->targets));
  }
  return out;
}

TEST(DataLoader, UsageExampleAndFileOrder) {
  const std::string pattern = WriteShards(MakeTestDir(), {41});  // (41-1)/4 = 10 windows
  DataLoaderOptions o = Options(pattern, 2, 4);
  o.shuffle = false;
  std::unique_ptr<DataLoader> l = OpenOrDie(o);
  ASSERT_NE(l, nullptr);
  EXPECT_EQ(l->num_windows(), 10);
  EXPECT_EQ(l->batches_per_epoch(), 5);
  absl::StatusOr<Batch> b = l->next_batch();
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->inputs.dtype(), core::DType::kI32);
  EXPECT_EQ(b->inputs.shape(), core::Shape({2, 4}));
  EXPECT_EQ(b->targets.shape(), core::Shape({2, 4}));
  EXPECT_EQ(Values(b->inputs), (std::vector<int32_t>{0, 1, 2, 3, 4, 5, 6, 7}));
  EXPECT_EQ(Values(b->targets), (std::vector<int32_t>{1, 2, 3, 4, 5, 6, 7, 8}));
  EXPECT_EQ(l->state().epoch, 0);
  EXPECT_EQ(l->state().batch, 1);
}

TEST(DataLoader, RowsMatchWindowAt) {
  const std::string pattern = WriteShards(MakeTestDir(), {101, 77, 250});
  DataLoaderOptions o = Options(pattern, 3, 8);
  o.world_size = 2;
  o.rank = 1;
  std::unique_ptr<DataLoader> l = OpenOrDie(o);
  std::unique_ptr<DataLoader> probe = OpenOrDie(o);
  ASSERT_NE(l, nullptr);
  for (int i = 0; i < 2 * l->batches_per_epoch() + 1; ++i) {
    absl::StatusOr<Batch> b = l->next_batch();
    ASSERT_TRUE(b.ok());
    for (int64_t r = 0; r < 3; ++r) {
      const auto [shard, window] = probe->WindowAt(b->epoch, b->batch, r);
      for (int64_t t = 0; t < 8; ++t) {
        EXPECT_EQ(b->inputs.data<int32_t>()[r * 8 + t], TokenAt(shard, window * 8 + t));
        EXPECT_EQ(b->targets.data<int32_t>()[r * 8 + t], TokenAt(shard, window * 8 + t + 1));
      }
    }
  }
}

TEST(DataLoader, RanksGetDisjointWindowsCoveringTheEpoch) {
  const std::string pattern = WriteShards(MakeTestDir(), {41, 33, 65, 25});  // 10 + 8 + 16 + 6 = 40 windows of T=4
  const int world = 4;
  std::set<std::pair<int64_t, int64_t>> seen;
  int64_t bpe = 0;
  for (int rank = 0; rank < world; ++rank) {
    DataLoaderOptions o = Options(pattern, 2, 4);
    o.world_size = world;
    o.rank = rank;
    std::unique_ptr<DataLoader> l = OpenOrDie(o);
    ASSERT_NE(l, nullptr);
    bpe = l->batches_per_epoch();
    for (int64_t b = 0; b < bpe; ++b) {
      for (int64_t r = 0; r < 2; ++r) EXPECT_TRUE(seen.insert(l->WindowAt(0, b, r)).second);
    }
  }
  EXPECT_EQ(bpe, 5);
  EXPECT_EQ(seen.size(), 40u);  // 40 windows, 4 ranks x 5 batches x 2 rows: each once
}

TEST(DataLoader, DeterministicBySeedAndEpoch) {
  const std::string pattern = WriteShards(MakeTestDir(), {401, 301, 201});
  DataLoaderOptions o = Options(pattern, 4, 10);
  std::unique_ptr<DataLoader> a = OpenOrDie(o);
  std::unique_ptr<DataLoader> b = OpenOrDie(o);
  ASSERT_NE(a, nullptr);
  const int n = 2 * static_cast<int>(a->batches_per_epoch());
  const auto sa = Take(*a, n);
  EXPECT_EQ(sa, Take(*b, n));
  o.seed = 99;
  std::unique_ptr<DataLoader> c = OpenOrDie(o);
  EXPECT_NE(sa, Take(*c, n));
  // Epochs come in different orders.
  const int half = static_cast<int>(a->batches_per_epoch());
  EXPECT_NE(std::vector<std::vector<int32_t>>(sa.begin(), sa.begin() + 2 * half),
            std::vector<std::vector<int32_t>>(sa.begin() + 2 * half, sa.end()));
}

TEST(DataLoader, EpochRolloverCoversEveryWindowEachEpoch) {
  const std::string pattern = WriteShards(MakeTestDir(), {49, 33, 17});  // 6 + 4 + 2 = 12 windows of T=8
  DataLoaderOptions o = Options(pattern, 3, 8);
  std::unique_ptr<DataLoader> l = OpenOrDie(o);
  std::unique_ptr<DataLoader> probe = OpenOrDie(o);
  ASSERT_NE(l, nullptr);
  ASSERT_EQ(l->batches_per_epoch(), 4);
  for (int64_t epoch = 0; epoch < 3; ++epoch) {
    std::set<std::pair<int64_t, int64_t>> seen;
    for (int64_t i = 0; i < 4; ++i) {
      absl::StatusOr<Batch> b = l->next_batch();
      ASSERT_TRUE(b.ok());
      EXPECT_EQ(b->epoch, epoch);
      EXPECT_EQ(b->batch, i);
      for (int64_t r = 0; r < 3; ++r) seen.insert(probe->WindowAt(epoch, i, r));
    }
    EXPECT_EQ(seen.size(), 12u);
  }
  EXPECT_EQ(l->state().epoch, 3);
  EXPECT_EQ(l->state().batch, 0);
}

TEST(DataLoader, ResumeFromSavedStateGivesTheExactRemainingBatches) {
  const std::string pattern = WriteShards(MakeTestDir(), {301, 257, 90, 1000});
  for (int depth : {0, 3}) {
    DataLoaderOptions o = Options(pattern, 2, 16);
    o.world_size = 2;
    o.rank = 1;
    o.prefetch_depth = depth;
    std::unique_ptr<DataLoader> full = OpenOrDie(o);
    ASSERT_NE(full, nullptr);
    const int bpe = static_cast<int>(full->batches_per_epoch());
    const int before = bpe - 2, after = bpe + 5;  // resume crosses an epoch boundary
    const auto all = Take(*full, before + after);

    std::unique_ptr<DataLoader> first = OpenOrDie(o);
    Take(*first, before);
    const std::string saved = DataLoaderStateToJson(first->state()).dump();

    std::unique_ptr<DataLoader> second = OpenOrDie(o);
    Take(*second, 1);  // a fresh process may have read ahead: set_state overrides
    absl::StatusOr<DataLoaderState> state = DataLoaderStateFromJson(nlohmann::json::parse(saved));
    ASSERT_TRUE(state.ok()) << state.status();
    EXPECT_EQ(*state, first->state());
    ASSERT_TRUE(second->set_state(*state).ok());
    EXPECT_EQ(Take(*second, after), std::vector<std::vector<int32_t>>(all.begin() + 2 * before, all.end()))
        << "prefetch_depth " << depth;
  }
}

// A job saved on 4 ranks with micro-batch 2 resumes on 2 ranks with
// micro-batch 3: the rows continue at the same window of the epoch's order
// (that of a 1-rank, 1-row loader), the epoch's leftover is dropped, and the
// next epoch starts at its window 0. Old states without "window" load too.
TEST(DataLoader, ResumeOnAnotherWorldSizeContinuesAtTheSameWindow) {
  const std::string pattern = WriteShards(MakeTestDir(), {301, 257, 90, 1000});  // 101 windows of T=16
  auto rows_of = [](const std::vector<std::vector<int32_t>>& batches, int64_t B, int64_t T) {
    std::vector<std::vector<int32_t>> rows;  // inputs only (batches alternate inputs, targets)
    for (size_t i = 0; i < batches.size(); i += 2) {
      for (int64_t r = 0; r < B; ++r) {
        rows.emplace_back(batches[i].begin() + r * T, batches[i].begin() + (r + 1) * T);
      }
    }
    return rows;
  };
  const int64_t T = 16;
  std::unique_ptr<DataLoader> order = OpenOrDie(Options(pattern, 1, T));  // the global order
  ASSERT_NE(order, nullptr);
  const int64_t windows = order->num_windows();
  const auto epoch0 = rows_of(Take(*order, static_cast<int>(windows)), 1, T);
  const auto epoch1 = rows_of(Take(*order, 7), 1, T);

  DataLoaderOptions four = Options(pattern, 2, T);
  four.world_size = 4;
  std::unique_ptr<DataLoader> saver = OpenOrDie(four);
  ASSERT_NE(saver, nullptr);
  const int before = 5;  // 5 global batches of 8 rows: 40 windows consumed
  Take(*saver, before);
  for (bool old_format : {false, true}) {
    nlohmann::json j = DataLoaderStateToJson(saver->state());
    EXPECT_EQ(j["window"], before * 8);
    if (old_format) j.erase("window");
    absl::StatusOr<DataLoaderState> state = DataLoaderStateFromJson(j);
    ASSERT_TRUE(state.ok()) << state.status();

    std::vector<std::vector<std::vector<int32_t>>> per_rank;
    const int64_t left = (windows - before * 8) / 6;  // whole global batches of 2 x 3 left
    for (int rank = 0; rank < 2; ++rank) {
      DataLoaderOptions two = Options(pattern, 3, T);
      two.world_size = 2;
      two.rank = rank;
      two.prefetch_depth = rank;  // with and without prefetch
      std::unique_ptr<DataLoader> l = OpenOrDie(two);
      ASSERT_NE(l, nullptr);
      ASSERT_TRUE(l->set_state(*state).ok());
      EXPECT_EQ(l->state().window, before * 8);
      per_rank.push_back(rows_of(Take(*l, static_cast<int>(left + 1)), 3, T));
    }
    std::vector<std::vector<int32_t>> got, want;
    for (int64_t k = 0; k < left + 1; ++k) {
      for (int rank = 0; rank < 2; ++rank) {
        got.insert(got.end(), per_rank[rank].begin() + 3 * k, per_rank[rank].begin() + 3 * k + 3);
      }
    }
    want.assign(epoch0.begin() + before * 8, epoch0.begin() + before * 8 + left * 6);
    want.insert(want.end(), epoch1.begin(), epoch1.begin() + 6);  // the next epoch from window 0
    EXPECT_EQ(got, want) << (old_format ? "state without \"window\"" : "current state");
  }
}

TEST(DataLoader, PrefetchOnAndOffGiveTheSameBatches) {
  const std::string pattern = WriteShards(MakeTestDir(), {500, 300, 211});
  DataLoaderOptions o = Options(pattern, 4, 12);
  o.prefetch_depth = 0;
  std::unique_ptr<DataLoader> off = OpenOrDie(o);
  ASSERT_NE(off, nullptr);
  const int n = 3 * static_cast<int>(off->batches_per_epoch()) + 1;
  const auto expected = Take(*off, n);
  for (int depth : {1, 2, 5}) {
    o.prefetch_depth = depth;
    std::unique_ptr<DataLoader> on = OpenOrDie(o);
    EXPECT_EQ(Take(*on, n), expected) << "prefetch_depth " << depth;
  }
}

TEST(DataLoader, HeldBatchesAreNotOverwritten) {
  const std::string pattern = WriteShards(MakeTestDir(), {800});
  DataLoaderOptions o = Options(pattern, 2, 8);
  o.prefetch_depth = 2;
  std::unique_ptr<DataLoader> l = OpenOrDie(o);
  ASSERT_NE(l, nullptr);
  std::vector<Batch> held;
  std::vector<std::vector<int32_t>> copies;
  for (int i = 0; i < 20; ++i) {
    absl::StatusOr<Batch> b = l->next_batch();
    ASSERT_TRUE(b.ok());
    copies.push_back(Values(b->inputs));
    held.push_back(*std::move(b));
  }
  for (int i = 0; i < 20; ++i) EXPECT_EQ(Values(held[i].inputs), copies[i]) << i;
}

TEST(DataLoader, CudaDeviceUsesPinnedMemoryOrSaysWhyNot) {
  const std::string pattern = WriteShards(MakeTestDir(), {100});
  DataLoaderOptions o = Options(pattern, 2, 4);
  o.device = core::Device::cuda(0);
  absl::StatusOr<std::unique_ptr<DataLoader>> l = DataLoader::Open(o);
  if (!core::pinned_host_allocator().ok()) {  // CPU build or no GPU: a clear error
    ASSERT_FALSE(l.ok());
    EXPECT_EQ(l.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_TRUE(absl::StrContains(l.status().message(), "no pinned host memory")) << l.status();
    GTEST_SKIP() << "no pinned host memory here";
  }
  ASSERT_TRUE(l.ok()) << l.status();
  absl::StatusOr<Batch> b = (*l)->next_batch();
  ASSERT_TRUE(b.ok());
  EXPECT_TRUE(b->inputs.is_pinned());
  EXPECT_TRUE(b->targets.is_pinned());
}

TEST(DataLoader, ManyShards) {
  std::vector<int64_t> sizes;
  for (int s = 0; s < 60; ++s) sizes.push_back(33 + 17 * (s % 7));
  const std::string pattern = WriteShards(MakeTestDir(), sizes);
  int64_t windows = 0;
  for (int64_t n : sizes) windows += (n - 1) / 8;
  DataLoaderOptions o = Options(pattern, 5, 8);
  o.world_size = 3;
  std::set<std::pair<int64_t, int64_t>> seen;
  for (int rank = 0; rank < 3; ++rank) {
    o.rank = rank;
    std::unique_ptr<DataLoader> l = OpenOrDie(o);
    ASSERT_NE(l, nullptr);
    EXPECT_EQ(l->shard_paths().size(), 60u);
    EXPECT_EQ(l->num_windows(), windows);
    EXPECT_EQ(l->batches_per_epoch(), windows / 15);
    for (int64_t b = 0; b < l->batches_per_epoch(); ++b) {
      for (int64_t r = 0; r < 5; ++r) EXPECT_TRUE(seen.insert(l->WindowAt(1, b, r)).second);
    }
    Take(*l, static_cast<int>(l->batches_per_epoch()) + 3);
  }
  EXPECT_EQ(static_cast<int64_t>(seen.size()), windows / 15 * 15);
  std::set<int64_t> shards_used;
  for (const auto& w : seen) shards_used.insert(w.first);
  EXPECT_GT(shards_used.size(), 50u);
}

// The same ids in uint16 and in uint32 (llm.c's Llama 3 header) shards give
// the same int32 batches; ids above 65535 arrive whole.
TEST(DataLoader, Uint32ShardsGiveTheSameBatches) {
  const std::string dir = MakeTestDir();
  std::vector<int32_t> ids(201);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>((i * 7919) % 65536);
  ASSERT_TRUE(WriteTokenShard(dir + "/narrow_000.bin", ids, TokenWidth::kUint16).ok());
  ASSERT_TRUE(WriteTokenShard(dir + "/wide_000.bin", ids, TokenWidth::kUint32).ok());
  std::unique_ptr<DataLoader> narrow = OpenOrDie(Options(dir + "/narrow_*.bin", 2, 8));
  std::unique_ptr<DataLoader> wide = OpenOrDie(Options(dir + "/wide_*.bin", 2, 8));
  ASSERT_NE(narrow, nullptr);
  ASSERT_NE(wide, nullptr);
  EXPECT_EQ(Take(*narrow, 12), Take(*wide, 12));  // past one epoch (12 batches of 2 windows)

  std::vector<int32_t> large(17);
  for (size_t i = 0; i < large.size(); ++i) large[i] = 128000 + static_cast<int32_t>(i);
  ASSERT_TRUE(WriteTokenShard(dir + "/large_000.bin", large, TokenWidth::kUint32).ok());
  DataLoaderOptions o = Options(dir + "/large_*.bin", 1, 16);
  o.shuffle = false;
  std::unique_ptr<DataLoader> l = OpenOrDie(o);
  ASSERT_NE(l, nullptr);
  const std::vector<std::vector<int32_t>> batch = Take(*l, 1);
  ASSERT_EQ(batch.size(), 2u);
  EXPECT_EQ(batch[0], std::vector<int32_t>(large.begin(), large.end() - 1));
  EXPECT_EQ(batch[1], std::vector<int32_t>(large.begin() + 1, large.end()));
}

// A shard of another tokenizer: the batch holding the first id past the
// vocabulary fails, naming the id, its position and the shard; the batches
// before it come whole. The id at 40 is window 4's last target (and window
// 5's first input), so the row's extra token is checked too.
TEST(DataLoader, TokenIdsOutsideTheVocabularyAreRefused) {
  const std::string dir = MakeTestDir();
  std::vector<int32_t> ids(81);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>(i % 100);
  ids[40] = 5000;
  ASSERT_TRUE(WriteTokenShard(dir + "/narrow_000.bin", ids, TokenWidth::kUint16).ok());
  for (int prefetch : {0, 2}) {
    DataLoaderOptions o = Options(dir + "/narrow_*.bin", 1, 8);
    o.shuffle = false;
    o.prefetch_depth = prefetch;
    o.vocab_size = 100;
    std::unique_ptr<DataLoader> l = OpenOrDie(o);
    ASSERT_NE(l, nullptr);
    for (int b = 0; b < 4; ++b) EXPECT_TRUE(l->next_batch().ok()) << b;
    absl::StatusOr<Batch> bad = l->next_batch();
    EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_TRUE(absl::StrContains(bad.status().message(), "token id 5000 at token 40 of shard '" + dir +
                                                              "/narrow_000.bin' is outside the model's "
                                                              "vocabulary [0, 100)"))
        << bad.status();
    o.vocab_size = 5001;  // holds it
    l = OpenOrDie(o);
    ASSERT_NE(l, nullptr);
    EXPECT_EQ(Take(*l, 10).size(), 20u);
  }
  // A uint32 shard.
  std::vector<int32_t> wide(17, 7);
  wide[3] = 2000000000;  // past any vocabulary
  ASSERT_TRUE(WriteTokenShard(dir + "/wide_000.bin", wide, TokenWidth::kUint32).ok());
  DataLoaderOptions o = Options(dir + "/wide_*.bin", 1, 16);
  o.vocab_size = 128256;
  std::unique_ptr<DataLoader> l = OpenOrDie(o);
  ASSERT_NE(l, nullptr);
  absl::StatusOr<Batch> bad = l->next_batch();
  EXPECT_TRUE(absl::StrContains(bad.status().message(), "token id 2000000000 at token 3 of shard"))
      << bad.status();
  o.vocab_size = -1;
  EXPECT_EQ(DataLoader::Open(o).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(DataLoader, Errors) {
  const std::string dir = MakeTestDir();
  absl::StatusOr<std::unique_ptr<DataLoader>> l = DataLoader::Open(Options(dir + "/nothing_*.bin", 2, 4));
  ASSERT_FALSE(l.ok());
  EXPECT_EQ(l.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(l.status().message(), "no shards matched the pattern")) << l.status();

  ASSERT_TRUE(WriteTokenShard(dir + "/a_000.bin", std::vector<uint16_t>(100, 1)).ok());
  ASSERT_TRUE(WriteTokenShard(dir + "/a_001.bin", std::vector<uint16_t>(4, 1)).ok());
  l = DataLoader::Open(Options(dir + "/a_*.bin", 2, 4));
  ASSERT_FALSE(l.ok());
  EXPECT_TRUE(absl::StrContains(l.status().message(), "a_001.bin' has 4 tokens, fewer than one window"))
      << l.status();

  l = DataLoader::Open(Options(dir + "/a_000.bin", 200, 4));
  ASSERT_FALSE(l.ok());
  EXPECT_EQ(l.status().code(), absl::StatusCode::kFailedPrecondition);

  DataLoaderOptions o = Options(dir + "/a_000.bin", 2, 4);
  o.rank = 2;
  o.world_size = 2;
  EXPECT_EQ(DataLoader::Open(o).status().code(), absl::StatusCode::kInvalidArgument);

  o.rank = 0;
  std::unique_ptr<DataLoader> ok = OpenOrDie(o);
  ASSERT_NE(ok, nullptr);
  DataLoaderState s = ok->state();
  s.seed = 7;
  absl::Status st = ok->set_state(s);
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StrContains(st.message(), "seed = 7")) << st;
  s = ok->state();
  s.window = ok->num_windows() + 1;
  EXPECT_EQ(ok->set_state(s).code(), absl::StatusCode::kInvalidArgument);
  s = ok->state();
  s.seq_len = 8;
  EXPECT_EQ(ok->set_state(s).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_FALSE(DataLoaderStateFromJson(nlohmann::json{{"epoch", 1}}).ok());
  EXPECT_FALSE(DataLoaderStateFromJson(nlohmann::json::parse("[1]")).ok());
}

// A saved state read back from a file: every field is range-checked and a
// bad one named (set_state compares only seed, seq_len and num_windows, so a
// batch_size 0 or a wrapped world_size would pass through otherwise).
TEST(DataLoader, SavedStateOutOfRangeIsRefusedNamingTheKey) {
  DataLoaderState good;
  good.epoch = 1;
  good.batch = 2;
  good.window = 8;
  good.seed = UINT64_MAX;  // any uint64_t is a seed
  good.batch_size = 2;
  good.seq_len = 4;
  good.world_size = 2;
  good.num_windows = 20;
  const nlohmann::json saved = DataLoaderStateToJson(good);
  absl::StatusOr<DataLoaderState> back = DataLoaderStateFromJson(saved);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, good);
  struct Case {
    const char* key;
    nlohmann::json value;
  };
  const Case cases[] = {{"batch_size", 0},       {"batch_size", -2},  {"world_size", 0},
                        {"world_size", -3},      {"world_size", int64_t{1} << 40},
                        {"seq_len", 0},          {"epoch", -1},       {"batch", -1},
                        {"window", -1},          {"num_windows", -1}, {"seed", -1},
                        {"batch_size", UINT64_MAX}, {"batch_size", 2.5}};
  for (const Case& c : cases) {
    nlohmann::json j = saved;
    j[c.key] = c.value;
    absl::StatusOr<DataLoaderState> s = DataLoaderStateFromJson(j);
    ASSERT_FALSE(s.ok()) << c.key << " = " << c.value.dump();
    EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_TRUE(absl::StrContains(s.status().message(), absl::StrCat("'", c.key, "' must be an integer")))
        << s.status();
    EXPECT_TRUE(absl::StrContains(s.status().message(), c.value.dump())) << s.status();
  }
  // Without "window" (an older state) it is computed, and its overflow refused.
  nlohmann::json old = saved;
  old.erase("window");
  ASSERT_TRUE(DataLoaderStateFromJson(old).ok());
  EXPECT_EQ(DataLoaderStateFromJson(old)->window, 2 * 2 * 2);
  old["batch"] = INT64_MAX / 2;
  EXPECT_TRUE(absl::StrContains(DataLoaderStateFromJson(old).status().message(), "overflows"));
}

}  // namespace
}  // namespace colossal::io

namespace colossal::io {
namespace {

void WriteMask(const std::string& path, const std::vector<uint8_t>& values) {
  absl::StatusOr<LossMaskWriter> w = LossMaskWriter::Create(path);
  ASSERT_TRUE(w.ok()) << w.status();
  ASSERT_TRUE(w->Append(values).ok());
  ASSERT_TRUE(w->Finish().ok());
}

// Every row of every batch, shuffled and on two ranks: a target is
// ignore_index exactly where the mask beside its shard says 0 for it (the
// window's token t + 1), the shard's token elsewhere; the inputs are the
// unmasked tokens. Random masks, so a shifted or ignored mask shows.
TEST(DataLoader, LossMasksMakeUncountedTargetsIgnoreIndex) {
  const std::string dir = MakeTestDir();
  const std::string pattern = WriteShards(dir, {301, 157});
  std::mt19937 rng(11);
  std::vector<std::vector<uint8_t>> masks;
  for (int s = 0; s < 2; ++s) {
    masks.emplace_back(s == 0 ? 301 : 157);
    for (uint8_t& v : masks.back()) v = (rng() % 3) != 0;
    WriteMask(absl::StrFormat("%s/train_%06d.mask", dir, s), masks.back());
  }
  for (int rank = 0; rank < 2; ++rank) {
    DataLoaderOptions o = Options(pattern, 3, 10);
    o.rank = rank;
    o.world_size = 2;
    o.ignore_index = -7;
    std::unique_ptr<DataLoader> l = OpenOrDie(o);
    ASSERT_NE(l, nullptr);
    EXPECT_TRUE(l->has_loss_masks());
    int64_t ignored = 0;
    for (int64_t b = 0; b < l->batches_per_epoch(); ++b) {
      absl::StatusOr<Batch> batch = l->next_batch();
      ASSERT_TRUE(batch.ok()) << batch.status();
      int64_t counted = 0;
      for (int64_t r = 0; r < 3; ++r) {
        const auto [shard, window] = l->WindowAt(0, b, r);
        for (int64_t t = 0; t < 10; ++t) {
          const int64_t at = window * 10 + t;
          EXPECT_EQ(batch->inputs.data<int32_t>()[r * 10 + t], TokenAt(static_cast<int>(shard), at));
          const int32_t target = batch->targets.data<int32_t>()[r * 10 + t];
          if (masks[shard][at + 1] != 0) {
            EXPECT_EQ(target, TokenAt(static_cast<int>(shard), at + 1)) << "shard " << shard << " token " << at + 1;
            ++counted;
          } else {
            EXPECT_EQ(target, -7) << "shard " << shard << " token " << at + 1;
            ++ignored;
          }
        }
      }
      EXPECT_EQ(batch->counted, counted) << "batch " << b;
    }
    EXPECT_GT(ignored, 0);
  }
  // Without masks nothing is ignored.
  const std::string plain = MakeTestDir() + "/plain";
  ::mkdir(plain.c_str(), 0755);
  std::unique_ptr<DataLoader> l = OpenOrDie(Options(WriteShards(plain, {50}), 2, 8));
  ASSERT_NE(l, nullptr);
  EXPECT_FALSE(l->has_loss_masks());
  absl::StatusOr<Batch> batch = l->next_batch();
  ASSERT_TRUE(batch.ok()) << batch.status();
  EXPECT_EQ(batch->counted, 2 * 8);
}

TEST(DataLoader, LossMasksMustCoverEveryShardWithItsLength) {
  const std::string dir = MakeTestDir();
  const std::string pattern = WriteShards(dir, {40, 40});
  WriteMask(dir + "/train_000001.mask", std::vector<uint8_t>(40, 1));
  absl::StatusOr<std::unique_ptr<DataLoader>> l = DataLoader::Open(Options(pattern, 1, 8));
  ASSERT_FALSE(l.ok());
  EXPECT_EQ(l.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StrContains(l.status().message(), "train_000000.bin' has no loss mask")) << l.status();

  WriteMask(dir + "/train_000000.mask", std::vector<uint8_t>(39, 1));
  l = DataLoader::Open(Options(pattern, 1, 8));
  ASSERT_FALSE(l.ok());
  EXPECT_EQ(l.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_TRUE(absl::StrContains(l.status().message(), "holds 39 tokens")) << l.status();

  WriteMask(dir + "/train_000000.mask", std::vector<uint8_t>(40, 1));
  EXPECT_TRUE(DataLoader::Open(Options(pattern, 1, 8)).ok());
}

}  // namespace
}  // namespace colossal::io

namespace colossal::io {
namespace {

// document_positions: each input token's position in its document, 0 at the
// row's first token and at each document start the mask flags; none without
// the option.
TEST(DataLoader, DocumentPositionsRestartAtEachDocument) {
  const std::string dir = MakeTestDir();
  const int64_t N = 200, T = 16;
  std::vector<int32_t> ids(N);
  for (int64_t i = 0; i < N; ++i) ids[i] = static_cast<int32_t>(1000 + i);
  ASSERT_TRUE(WriteTokenShard(dir + "/train_000000.bin", ids, TokenWidth::kUint16).ok());
  std::mt19937 rng(9);
  std::vector<uint8_t> flags(N, kCounted);
  for (int64_t i = 0; i < N; i += 1 + static_cast<int64_t>(rng() % 9)) flags[i] |= kDocumentStart;
  WriteMask(dir + "/train_000000.mask", flags);
  for (bool want : {true, false}) {
    DataLoaderOptions o = Options(dir + "/train_*.bin", 3, T);
    o.document_positions = want;
    std::unique_ptr<DataLoader> l = OpenOrDie(o);
    ASSERT_NE(l, nullptr);
    for (int64_t b = 0; b < l->batches_per_epoch(); ++b) {
      absl::StatusOr<Batch> batch = l->next_batch();
      ASSERT_TRUE(batch.ok()) << batch.status();
      if (!want) {
        EXPECT_FALSE(batch->positions.defined());
        continue;
      }
      ASSERT_EQ(batch->positions.shape(), core::Shape({3, T}));
      for (int64_t r = 0; r < 3; ++r) {
        const int64_t first = l->WindowAt(0, b, r).second * T;
        int32_t expected = 0;
        for (int64_t t = 0; t < T; ++t) {
          expected = t == 0 || (flags[first + t] & kDocumentStart) != 0 ? 0 : expected + 1;
          EXPECT_EQ(batch->positions.data<int32_t>()[r * T + t], expected) << "token " << first + t;
        }
      }
    }
  }
}

// pack = false: each row is one document from its start (where the mask's
// kDocumentStart says), cut at T + 1 tokens or padded with inputs 0 and
// ignored targets; a document continues into the next shard; every document
// comes once an epoch, on two ranks; masked targets stay ignored.
TEST(DataLoader, DocumentRowsStartAtDocumentsAndNeverCrossThem) {
  const std::string dir = MakeTestDir();
  // Shards of ids 1000 + i (i counts over all), documents of random lengths
  // 1..20 over the concatenation, so some straddle the shards (one across an
  // empty shard).
  const std::vector<int64_t> sizes = {97, 0, 64};
  std::mt19937 rng(5);
  std::vector<uint8_t> flags(161);
  std::vector<int64_t> starts;
  for (int64_t i = 0; i < 161; i += 1 + static_cast<int64_t>(rng() % 20)) starts.push_back(i);
  for (size_t i = 0; i < flags.size(); ++i) flags[i] = (rng() % 4 != 0) ? kCounted : 0;
  for (int64_t s : starts) flags[s] |= kDocumentStart;
  int64_t at = 0;
  for (size_t s = 0; s < sizes.size(); ++s) {
    std::vector<int32_t> ids(sizes[s]);
    for (int64_t i = 0; i < sizes[s]; ++i) ids[i] = static_cast<int32_t>(1000 + at + i);
    ASSERT_TRUE(WriteTokenShard(absl::StrFormat("%s/train_%06d.bin", dir, s), ids, TokenWidth::kUint16).ok());
    WriteMask(absl::StrFormat("%s/train_%06d.mask", dir, s),
              std::vector<uint8_t>(flags.begin() + at, flags.begin() + at + sizes[s]));
    at += sizes[s];
  }
  const int64_t T = 12;
  std::multiset<int64_t> seen;
  for (int rank = 0; rank < 2; ++rank) {
    DataLoaderOptions o = Options(dir + "/train_*.bin", 2, T);
    o.pack = false;
    o.rank = rank;
    o.world_size = 2;
    o.vocab_size = 2000;
    std::unique_ptr<DataLoader> l = OpenOrDie(o);
    ASSERT_NE(l, nullptr);
    EXPECT_EQ(l->num_windows(), static_cast<int64_t>(starts.size()));
    for (int64_t b = 0; b < l->batches_per_epoch(); ++b) {
      absl::StatusOr<Batch> batch = l->next_batch();
      ASSERT_TRUE(batch.ok()) << batch.status();
      int64_t n_counted = 0;
      for (int64_t r = 0; r < 2; ++r) {
        const int32_t first = batch->inputs.data<int32_t>()[r * T];
        const int64_t start = first - 1000;
        ASSERT_TRUE(std::binary_search(starts.begin(), starts.end(), start)) << "row starts at token " << start;
        seen.insert(start);
        const auto next = std::upper_bound(starts.begin(), starts.end(), start);
        const int64_t end = next == starts.end() ? 161 : *next;
        const int64_t n = std::min<int64_t>(end - start, T + 1);  // the row's tokens
        for (int64_t t = 0; t < T; ++t) {
          EXPECT_EQ(batch->inputs.data<int32_t>()[r * T + t], t < n ? 1000 + start + t : 0) << start << " " << t;
          const bool counted = t + 1 < n && (flags[start + t + 1] & kCounted) != 0;
          EXPECT_EQ(batch->targets.data<int32_t>()[r * T + t], counted ? 1000 + start + t + 1 : -100)
              << start << " " << t;
          n_counted += counted ? 1 : 0;
        }
      }
      EXPECT_EQ(batch->counted, n_counted) << "batch " << b;
    }
  }
  // 2 ranks x 2 rows a batch: every document but the epoch's leftover, once.
  EXPECT_EQ(static_cast<int64_t>(seen.size()), static_cast<int64_t>(starts.size()) / 4 * 4);
  EXPECT_EQ(std::set<int64_t>(seen.begin(), seen.end()).size(), seen.size());

  // Without masks there is nothing to find documents by.
  const std::string plain = dir + "/plain";
  ::mkdir(plain.c_str(), 0755);
  DataLoaderOptions o = Options(WriteShards(plain, {50}), 2, 8);
  o.pack = false;
  absl::StatusOr<std::unique_ptr<DataLoader>> l = DataLoader::Open(o);
  ASSERT_FALSE(l.ok());
  EXPECT_TRUE(absl::StrContains(l.status().message(), "packing = false")) << l.status();
}

}  // namespace
}  // namespace colossal::io
