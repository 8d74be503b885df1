#include "core/context/matmul_algo_cache.h"

#include <gtest/gtest.h>

#include <thread>
#include <vector>

namespace colossal::core {
namespace {

MatmulAlgoKey key(int64_t m, int32_t epilogue = 1) {
  MatmulAlgoKey k;
  k.m = m;
  k.n = 2304;
  k.k = 768;
  k.epilogue = epilogue;
  return k;
}

TEST(MatmulAlgoCacheTest, FindInsertReplaceClear) {
  MatmulAlgoCache cache;
  EXPECT_FALSE(cache.find(key(8192)).has_value());
  MatmulAlgo algo;
  algo.data[0] = 42;
  algo.workspace_bytes = 1 << 20;
  cache.insert(key(8192), algo);
  ASSERT_TRUE(cache.find(key(8192)).has_value());
  EXPECT_EQ(cache.find(key(8192))->data[0], 42u);
  EXPECT_EQ(cache.find(key(8192))->workspace_bytes, size_t{1} << 20);
  EXPECT_FALSE(cache.find(key(8192, 4)).has_value());  // another epilogue is another problem
  EXPECT_FALSE(cache.find(key(4096)).has_value());
  algo.data[0] = 7;
  cache.insert(key(8192), algo);
  EXPECT_EQ(cache.find(key(8192))->data[0], 7u);
  EXPECT_EQ(cache.size(), 1u);
  cache.clear();
  EXPECT_EQ(cache.size(), 0u);
}

TEST(MatmulAlgoCacheTest, KeepsHowTheAlgorithmWasChosen) {
  MatmulAlgoCache cache;
  EXPECT_EQ(MatmulAlgo{}.source, MatmulAlgoSource::kHeuristic);
  MatmulAlgo provisional;
  provisional.data[0] = 1;
  provisional.source = MatmulAlgoSource::kProvisional;
  cache.insert(key(8192), provisional);
  EXPECT_EQ(cache.find(key(8192))->source, MatmulAlgoSource::kProvisional);
  MatmulAlgo tuned;
  tuned.data[0] = 2;
  tuned.source = MatmulAlgoSource::kAutotuned;
  cache.insert(key(8192), tuned);  // autotuning replaces the provisional choice
  EXPECT_EQ(cache.find(key(8192))->source, MatmulAlgoSource::kAutotuned);
  EXPECT_EQ(cache.find(key(8192))->data[0], 2u);
  EXPECT_EQ(cache.size(), 1u);
  cache.insert(key(4096), MatmulAlgo{});
  std::vector<std::pair<MatmulAlgoKey, MatmulAlgo>> entries = cache.entries();
  ASSERT_EQ(entries.size(), 2u);
  int tuned_entries = 0;
  for (const auto& [k, a] : entries) {
    if (k == key(8192)) {
      EXPECT_EQ(a.source, MatmulAlgoSource::kAutotuned);
      ++tuned_entries;
    } else {
      EXPECT_TRUE(k == key(4096));
      EXPECT_EQ(a.source, MatmulAlgoSource::kHeuristic);
    }
  }
  EXPECT_EQ(tuned_entries, 1);
}

TEST(MatmulAlgoCacheTest, KeepsWhichLibraryRunsTheProblem) {
  EXPECT_EQ(MatmulAlgo{}.library, MatmulAlgoLibrary::kCublasLt);
  EXPECT_STREQ(matmul_algo_library_name(MatmulAlgoLibrary::kCublasLt), "cublasLt");
  EXPECT_STREQ(matmul_algo_library_name(MatmulAlgoLibrary::kCublas), "cublas");
  MatmulAlgoCache cache;
  MatmulAlgo provisional;  // heuristic #1 of cuBLASLt, taken during a capture
  provisional.data[0] = 1;
  provisional.source = MatmulAlgoSource::kProvisional;
  cache.insert(key(8192), provisional);
  EXPECT_EQ(cache.find(key(8192))->library, MatmulAlgoLibrary::kCublasLt);
  MatmulAlgo cublas;  // autotuning found cuBLAS fastest
  cublas.source = MatmulAlgoSource::kAutotuned;
  cublas.library = MatmulAlgoLibrary::kCublas;
  cache.insert(key(8192), cublas);
  ASSERT_TRUE(cache.find(key(8192)).has_value());
  EXPECT_EQ(cache.find(key(8192))->library, MatmulAlgoLibrary::kCublas);
  EXPECT_EQ(cache.find(key(8192))->source, MatmulAlgoSource::kAutotuned);
  EXPECT_EQ(cache.entries().at(0).second.library, MatmulAlgoLibrary::kCublas);
}

TEST(MatmulAlgoCacheTest, EveryFieldIsPartOfTheKey) {
  MatmulAlgoKey base;
  std::vector<MatmulAlgoKey> variants;
  auto vary = [&](auto setter) {
    MatmulAlgoKey k = base;
    setter(k);
    variants.push_back(k);
  };
  vary([](MatmulAlgoKey& k) { k.m = 1; });
  vary([](MatmulAlgoKey& k) { k.n = 1; });
  vary([](MatmulAlgoKey& k) { k.k = 1; });
  vary([](MatmulAlgoKey& k) { k.batch = 2; });
  vary([](MatmulAlgoKey& k) { k.lda = 1; });
  vary([](MatmulAlgoKey& k) { k.ldb = 1; });
  vary([](MatmulAlgoKey& k) { k.ldc = 1; });
  vary([](MatmulAlgoKey& k) { k.stride_a = 1; });
  vary([](MatmulAlgoKey& k) { k.stride_b = 1; });
  vary([](MatmulAlgoKey& k) { k.stride_c = 1; });
  vary([](MatmulAlgoKey& k) { k.a_type = 1; });
  vary([](MatmulAlgoKey& k) { k.b_type = 1; });
  vary([](MatmulAlgoKey& k) { k.c_type = 1; });
  vary([](MatmulAlgoKey& k) { k.compute_type = 1; });
  vary([](MatmulAlgoKey& k) { k.scale_type = 1; });
  vary([](MatmulAlgoKey& k) { k.op_a = 1; });
  vary([](MatmulAlgoKey& k) { k.op_b = 1; });
  vary([](MatmulAlgoKey& k) { k.epilogue = 1; });
  vary([](MatmulAlgoKey& k) { k.align_a = 1; });
  vary([](MatmulAlgoKey& k) { k.align_b = 1; });
  vary([](MatmulAlgoKey& k) { k.align_c = 1; });
  vary([](MatmulAlgoKey& k) { k.align_bias = 1; });
  vary([](MatmulAlgoKey& k) { k.align_aux = 1; });
  vary([](MatmulAlgoKey& k) { k.aux_ld = 1; });
  vary([](MatmulAlgoKey& k) { k.align_addend = 1; });
  MatmulAlgoCache cache;
  cache.insert(base, MatmulAlgo{});
  for (size_t i = 0; i < variants.size(); ++i) {
    EXPECT_FALSE(cache.find(variants[i]).has_value()) << "field " << i;
    cache.insert(variants[i], MatmulAlgo{});
  }
  EXPECT_EQ(cache.size(), variants.size() + 1);
}

TEST(MatmulAlgoCacheTest, ThreadSafe) {
  MatmulAlgoCache cache;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&cache, t] {
      for (int i = 0; i < 1000; ++i) {
        MatmulAlgo a;
        a.data[0] = i;
        cache.insert(key(t * 1000 + i), a);
        (void)cache.find(key(i));
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(cache.size(), 4000u);
  EXPECT_EQ(cache.find(key(2999))->data[0], 999u);
}

}  // namespace
}  // namespace colossal::core
